// A chat template's source (the Jinja lexer, parser and renderer, through ChatTemplate as a
// model's template is used): parsed, then rendered over one conversation with a system prompt,
// reasoning, a tool call, a tool result and tools, and the variables the Jinja tests use.
#include <nlohmann/json.hpp>

#include "fuzz_target.h"
#include "tokenizer/chat_template.h"

namespace {

const nlohmann::ordered_json kConfig = nlohmann::ordered_json::parse(R"({
  "bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|im_end|>"},
  "additional_special_tokens": ["<|im_start|>", "<think>"]})");

kiln::ChatTemplateRequest conversation() {
  kiln::ChatTemplateRequest r;
  r.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Hi <there> & \"you\" Grüße 日本 😀"},
    {"role": "assistant", "content": "  Let me look.  ", "reasoning_content": "The user greets.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather",
                     "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "assistant", "content": "<think>\nwarm\n</think>\n\nIt is 21 degrees."}])");
  r.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}])");
  r.generation_prompt = kiln::GenerationPrompt::kAdd;
  r.variables = nlohmann::ordered_json::parse(R"({"enable_thinking": false, "n": 7, "f": 2.5,
    "s": "Hello, World", "empty": "", "none": null, "items": [3, 1, 2], "words": ["b", "A", "c", "a"],
    "d": {"z": 1, "a": {"b": [10, 20]}, "m": "x"}, "flag": true})");
  return r;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const kiln::ChatTemplateRequest request = conversation();
  auto t = kiln::ChatTemplate::from_source(kiln::fuzz::as_text(data, size), kConfig);
  if (!t.ok()) return 0;
  (void)t->render(request);
  return 0;
}
