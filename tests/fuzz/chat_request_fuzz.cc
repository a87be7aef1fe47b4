// POST /v1/chat/completions up to the prompt's tokens, as handle_chat runs it: the body parsed
// (nesting limit), the request read field by field, the error serialised as the route sends it,
// then the messages rendered by the real Qwen3 chat template and encoded by its tokenizer.
#include "request_body.h"
#include "server/openai_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

const kiln::ChatTemplate* chat_template = nullptr;
const kiln::Tokenizer* tokenizer = nullptr;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  chat_template = kiln::fuzz::load_qwen3<kiln::ChatTemplate>([](const std::string& d) { return kiln::ChatTemplate::load(d); });
  tokenizer = kiln::fuzz::load_qwen3<kiln::Tokenizer>([](const std::string& d) { return kiln::Tokenizer::load(d); });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  httplib::Response res;
  kiln::Json body;
  if (!kiln::fuzz::read_body(data, size, body, res)) return 0;
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
