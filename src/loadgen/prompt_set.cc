#include "loadgen/prompt_set.h"

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace kiln::loadgen {
namespace {

// Validates one parsed line; `where` is "FILE:LINE".
Result<Prompt> prompt_from_json(const nlohmann::json& j, const std::string& where) {
  if (!j.is_object()) return format_error(where + ": a prompt is a JSON object, got " + std::string(j.type_name()));
  for (const auto& [key, value] : j.items()) {
    if (key != "id" && key != "messages" && key != "max_tokens") {
      return format_error(where + ": unknown field \"" + key + "\" (expected id, messages, max_tokens)");
    }
  }
  Prompt p;
  auto id = j.find("id");
  if (id == j.end() || !id->is_string() || id->get<std::string>().empty()) {
    return format_error(where + ": field \"id\" must be a non-empty string");
  }
  p.id = id->get<std::string>();
  auto messages = j.find("messages");
  if (messages == j.end()) return format_error(where + ": field \"messages\" is missing");
  if (!messages->is_array() || messages->empty()) {
    return format_error(where + ": field \"messages\" must be a non-empty array");
  }
  for (size_t i = 0; i < messages->size(); ++i) {
    const nlohmann::json& m = (*messages)[i];
    auto role = m.is_object() ? m.find("role") : m.end();
    if (!m.is_object() || role == m.end() || !role->is_string()) {
      return format_error(where + ": field \"messages[" + std::to_string(i) + "]\" must be an object with a string \"role\"");
    }
  }
  p.messages = *messages;
  if (auto mt = j.find("max_tokens"); mt != j.end()) {
    if (!mt->is_number_integer() || mt->get<int64_t>() < 1) {
      return format_error(where + ": field \"max_tokens\" must be a positive integer");
    }
    p.max_tokens = mt->get<int64_t>();
  }
  return p;
}

}  // namespace

Result<PromptSet> parse_prompt_set(std::string_view text, const std::string& source) {
  PromptSet set;
  std::set<std::string> ids;
  size_t line_no = 0, pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const std::string where = source + ":" + std::to_string(line_no);
    nlohmann::json j = nlohmann::json::parse(line.begin(), line.end(), nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) return format_error(where + ": not valid JSON");
    KILN_ASSIGN_OR_RETURN(Prompt p, prompt_from_json(j, where));
    if (!ids.insert(p.id).second) return format_error(where + ": field \"id\" repeats \"" + p.id + "\"");
    set.prompts.push_back(std::move(p));
  }
  if (set.prompts.empty()) return format_error(source + ": the prompt set has no prompts");
  return set;
}

Result<PromptSet> load_prompt_set(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("prompt set " + path + " cannot be opened");
  std::stringstream ss;
  ss << in.rdbuf();
  KILN_ASSIGN_OR_RETURN(PromptSet set, parse_prompt_set(ss.str(), path));
  set.name = std::filesystem::path(path).stem().string();
  return set;
}

}  // namespace kiln::loadgen
