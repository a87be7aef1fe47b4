// POST /v1/completions and /v1/completions/batch up to the prompts' tokens: the body parsed
// (nesting limit), read as either route reads it, the error serialised as the route sends it, and
// text prompts encoded by the real Qwen3 tokenizer.
#include <cstdio>
#include <cstdlib>

#include <httplib.h>

#include "fuzz_target.h"
#include "server/openai_request.h"
#include "server/route_support.h"
#include "tokenizer/qwen3_dir.h"
#include "tokenizer/tokenizer.h"

namespace {

const kiln::Tokenizer* tokenizer = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto tok = kiln::Tokenizer::load(kiln::testing::qwen3_dir());
  if (!tok.ok()) {
    std::fprintf(stderr, "the Qwen3 tokenizer is missing at %s: run scripts/fetch-tokenizer\n",
                 kiln::testing::qwen3_dir().c_str());
    std::exit(1);
  }
  tokenizer = new kiln::Tokenizer(std::move(*tok));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Request req;
  req.body = std::string(kiln::fuzz::as_text(data, size));
  httplib::Response res;
  kiln::Json body;
  if (auto e = kiln::parse_body(req, body)) {
    kiln::send_error(res, *e);
    return 0;
  }
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
