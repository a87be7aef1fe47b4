// Builds the variables transformers passes to the template: messages, tools, documents (None),
// add_generation_prompt, the special tokens map, then the caller's extra variables.
#include "tokenizer/chat_template.h"
#include "core/json_text.h"

#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace kiln {
namespace {

Result<std::string> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found(path.string() + " cannot be opened");
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// A special token in tokenizer_config.json: a string or an AddedToken object with "content".
std::optional<std::string> token_text(const nlohmann::ordered_json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return std::nullopt;
}

}  // namespace

Result<ChatTemplate> ChatTemplate::from_source(std::string_view source, const nlohmann::ordered_json& config) {
  KILN_ASSIGN_OR_RETURN(jinja::Template parsed, jinja::Template::parse(source));
  ChatTemplate t;
  t.template_ = std::move(parsed);
  t.source_ = std::string(source);
  // transformers' special_tokens_map: the attributes that are set, in this order.
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.is_object() || !config.contains(key)) continue;
    if (auto text = token_text(config[key])) t.special_tokens_.emplace_back(key, jinja::Value(*text));
  }
  if (config.is_object() && config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    std::vector<jinja::Value> extra;
    for (const auto& tok : config["additional_special_tokens"]) {
      if (auto text = token_text(tok)) extra.emplace_back(*text);
    }
    if (!extra.empty()) t.special_tokens_.emplace_back("additional_special_tokens", jinja::Value::list(std::move(extra)));
  }
  return t;
}

Result<ChatTemplate> ChatTemplate::load(const std::string& dir) {
  const std::filesystem::path base(dir);
  nlohmann::ordered_json config = nlohmann::ordered_json::object();
  const auto config_path = base / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::exists(config_path, ec)) {
    KILN_ASSIGN_OR_RETURN(std::string text, read_file(config_path));
    auto parsed = parse_ordered_json(text, config_path.string());
    if (!parsed.ok()) return format_error(parsed.status().message());
    config = std::move(*parsed);
  }
  std::string source;
  std::string origin;
  const auto jinja_path = base / "chat_template.jinja";
  if (std::filesystem::exists(jinja_path, ec)) {
    KILN_ASSIGN_OR_RETURN(source, read_file(jinja_path));
    origin = jinja_path.string();
  } else if (config.contains("chat_template") && config["chat_template"].is_string()) {
    source = config["chat_template"].get<std::string>();
    origin = config_path.string();
  } else if (config.contains("chat_template") && config["chat_template"].is_array()) {
    for (const auto& named : config["chat_template"]) {
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template") && named["template"].is_string()) {
        source = named["template"].get<std::string>();
        origin = config_path.string() + " (template \"default\")";
      }
    }
    if (origin.empty()) return not_found(config_path.string() + " has chat templates but none named \"default\"");
  } else {
    return not_found("no chat template in " + dir + " (looked for chat_template.jinja and \"chat_template\" in tokenizer_config.json)");
  }
  auto t = from_source(source, config);
  if (!t.ok()) return t.status().with_context(origin);
  return t;
}

Result<std::string> ChatTemplate::render(const ChatTemplateRequest& request) const {
  if (!request.messages.is_array()) return invalid_argument("messages must be a JSON array");
  if (!request.tools.is_null() && !request.tools.is_array()) return invalid_argument("tools must be a JSON array or null");
  if (!request.variables.is_object()) return invalid_argument("template variables must be a JSON object");
  std::vector<std::pair<std::string, jinja::Value>> vars;
  vars.emplace_back("messages", jinja::Value::from_json(request.messages));
  vars.emplace_back("tools", jinja::Value::from_json(request.tools));
  vars.emplace_back("documents", jinja::Value(jinja::None{}));
  vars.emplace_back("add_generation_prompt", jinja::Value(request.generation_prompt == GenerationPrompt::kAdd));
  for (const auto& st : special_tokens_) vars.push_back(st);
  for (auto it = request.variables.begin(); it != request.variables.end(); ++it) {
    vars.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  }
  return template_.render(vars);
}

}  // namespace kiln
