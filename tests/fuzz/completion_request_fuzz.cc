// POST /v1/completions and /v1/completions/batch up to the prompts' tokens: the body parsed
// (nesting limit), read as either route reads it, the error serialised as the route sends it, and
// text prompts encoded by the real Qwen3 tokenizer.
#include "request_body.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace {

const kiln::Tokenizer* tokenizer = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  tokenizer = kiln::fuzz::load_qwen3<kiln::Tokenizer>([](const std::string& d) { return kiln::Tokenizer::load(d); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Response res;
  kiln::Json body;
  if (!kiln::fuzz::read_body(data, size, body, res)) return 0;
  for (bool batch : {false, true}) {
    kiln::CompletionRequest cr;
    if (auto e = kiln::parse_completion_request(body, batch, cr)) {
      kiln::send_error(res, *e);
      continue;
    }
    for (const kiln::PromptInput& p : cr.prompts)
      if (!p.is_ids) tokenizer->encode(p.text);
  }
  return 0;
}
