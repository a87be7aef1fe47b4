// POST /v1/chat/completions up to the prompt's tokens, as handle_chat runs it: the body parsed
// (nesting limit), the request read field by field, the error serialised as the route sends it,
// then the messages rendered by the real Qwen3 chat template and encoded by its tokenizer.
#include <cstdio>
#include <cstdlib>

#include <httplib.h>

#include "fuzz_target.h"
#include "server/openai_request.h"
#include "server/route_support.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/qwen3_dir.h"
#include "tokenizer/tokenizer.h"

namespace {

const kiln::ChatTemplate* chat_template = nullptr;
const kiln::Tokenizer* tokenizer = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  auto t = kiln::ChatTemplate::load(kiln::testing::qwen3_dir());
  auto tok = kiln::Tokenizer::load(kiln::testing::qwen3_dir());
  if (!t.ok() || !tok.ok()) {
    std::fprintf(stderr, "the Qwen3 tokenizer is missing at %s: run scripts/fetch-tokenizer\n",
                 kiln::testing::qwen3_dir().c_str());
    std::exit(1);
  }
  chat_template = new kiln::ChatTemplate(std::move(*t));
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
  kiln::ChatRequest cr;
  if (auto e = kiln::parse_chat_request(body, cr)) {
    kiln::send_error(res, *e);
    return 0;
  }
  kiln::ChatTemplateRequest t;
  t.messages = cr.messages;
  if (!cr.tool_choice_none) t.tools = cr.tools;
  t.generation_prompt = kiln::GenerationPrompt::kAdd;
  t.variables = cr.template_variables;
  auto rendered = chat_template->render(t);
  if (!rendered.ok()) {
    kiln::send_error(res, kiln::ApiError::invalid("messages", rendered.status().message()));
    return 0;
  }
  tokenizer->encode(*rendered);
  return 0;
}
