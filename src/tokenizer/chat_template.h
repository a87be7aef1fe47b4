// A model's chat template (chat_template.jinja, or "chat_template" in tokenizer_config.json)
// rendered as transformers' apply_chat_template(..., tokenize=False) renders it: messages, tools,
// add_generation_prompt, the tokenizer's special tokens and extra variables such as
// enable_thinking.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "tokenizer/jinja/template.h"

namespace kiln {

enum class GenerationPrompt { kOmit, kAdd };

struct ChatTemplateRequest {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{"role": ..., "content": ...}, ...]
  nlohmann::ordered_json tools;  // null when there are no tools; else an array of JSON schemas
  GenerationPrompt generation_prompt = GenerationPrompt::kOmit;
  nlohmann::ordered_json variables = nlohmann::ordered_json::object();  // e.g. {"enable_thinking": false}
};

class ChatTemplate {
 public:
  // Reads the template from `dir` (chat_template.jinja first, then tokenizer_config.json) and the
  // special tokens from tokenizer_config.json.
  static Result<ChatTemplate> load(const std::string& dir);
  // A template from source, with special tokens given as tokenizer_config.json would.
  static Result<ChatTemplate> from_source(std::string_view source,
                                          const nlohmann::ordered_json& tokenizer_config = nlohmann::ordered_json::object());

  Result<std::string> render(const ChatTemplateRequest& request) const;
  const std::string& source() const { return source_; }  // the template's text

 private:
  jinja::Template template_;
  std::string source_;
  std::vector<std::pair<std::string, jinja::Value>> special_tokens_;
};

}  // namespace kiln
