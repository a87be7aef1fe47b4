// Parsing of one span's body is strict (a malformed span stays text the user can read); typing of
// XML-ish parameter values follows the tool's JSON schema, as the chat template showed it to the
// model.
#include "server/tool_call_parser.h"
#include "core/json_text.h"

#include <cstdint>
#include <optional>
#include <random>

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_trim_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_trim_space(s.back())) s.remove_suffix(1);
  return s;
}

std::string dump(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

std::string new_call_id() {
  static constexpr std::string_view kAlnum =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
  thread_local std::mt19937_64 rng((uint64_t{std::random_device{}()} << 32) ^ std::random_device{}());
  std::uniform_int_distribution<size_t> pick(0, kAlnum.size() - 1);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlnum[pick(rng)];
  return id;
}

// j[key] when j is an object that has it, else nullptr.
const ojson* child(const ojson* j, const char* key) {
  if (j == nullptr || !j->is_object()) return nullptr;
  auto it = j->find(key);
  return it == j->end() ? nullptr : &*it;
}

// The declared schema "type" of parameter `param` of function `name` in `tools`, or nullptr.
const ojson* declared_type(const ojson& tools, const std::string& name, const std::string& param) {
  if (!tools.is_array()) return nullptr;
  for (const ojson& tool : tools) {
    const ojson* fn = child(&tool, "function");
    if (fn == nullptr) fn = &tool;
    const ojson* fn_name = child(fn, "name");
    if (fn_name == nullptr || !fn_name->is_string() || fn_name->get<std::string>() != name) continue;
    return child(child(child(child(fn, "parameters"), "properties"), param.c_str()), "type");
  }
  return nullptr;
}

bool has_type(const ojson& value, const std::string& type) {
  if (type == "integer" || type == "number") return value.is_number();
  if (type == "boolean") return value.is_boolean();
  if (type == "object") return value.is_object();
  if (type == "array") return value.is_array();
  if (type == "null") return value.is_null();
  return false;  // "string": raw text stays as written
}

ojson typed_value(const std::string& raw, const ojson* type) {
  auto read = parse_ordered_json(raw, "a parameter");
  if (!read.ok()) return raw;
  ojson parsed = std::move(*read);
  if (type == nullptr) return parsed;
  if (type->is_string() && has_type(parsed, type->get<std::string>())) return parsed;
  if (type->is_array()) {
    for (const ojson& t : *type) {
      if (t.is_string() && has_type(parsed, t.get<std::string>())) return parsed;
    }
  }
  return raw;
}

struct ParsedCall {
  std::string name;
  std::string arguments_json;
};

// {"name": ..., "arguments": {...}} ("parameters" is accepted for "arguments"; arguments given as
// a string must hold a JSON object).
std::optional<ParsedCall> parse_json_body(std::string_view body) {
  const ojson j = parse_ordered_json(body, "a tool call").value_or(ojson());
  const ojson* name = child(&j, "name");
  if (name == nullptr || !name->is_string() || name->get<std::string>().empty()) return std::nullopt;
  const ojson* args = child(&j, "arguments");
  if (args == nullptr) args = child(&j, "parameters");
  ojson arguments = ojson::object();
  if (args != nullptr && args->is_string()) {
    arguments = parse_ordered_json(args->get<std::string>(), "arguments").value_or(ojson());
  } else if (args != nullptr && !args->is_null()) {
    arguments = *args;
  }
  if (!arguments.is_object()) return std::nullopt;
  return ParsedCall{name->get<std::string>(), dump(arguments)};
}

// <function=NAME> (<parameter=P>VALUE</parameter>)* </function>, whitespace between elements;
// one newline directly after <parameter=P> and one directly before </parameter> are the
// template's framing, not the value.
std::optional<ParsedCall> parse_xml_body(std::string_view body, const ojson& tools) {
  constexpr std::string_view kFunction = "<function=", kFunctionEnd = "</function>";
  constexpr std::string_view kParam = "<parameter=", kParamEnd = "</parameter>";
  auto lstrip = [](std::string_view s) {
    while (!s.empty() && is_trim_space(s.front())) s.remove_prefix(1);
    return s;
  };
  // Reads "NAME>" after a prefix; the name must be non-empty and on one line.
  auto read_name = [](std::string_view& s, std::string* name) {
    const size_t gt = s.find('>');
    if (gt == std::string_view::npos) return false;
    const std::string_view n = trim(s.substr(0, gt));
    if (n.empty() || n.find_first_of("<\n") != std::string_view::npos) return false;
    *name = std::string(n);
    s.remove_prefix(gt + 1);
    return true;
  };

  body = lstrip(body);
  if (!body.starts_with(kFunction)) return std::nullopt;
  body.remove_prefix(kFunction.size());
  ParsedCall call;
  if (!read_name(body, &call.name)) return std::nullopt;
  ojson arguments = ojson::object();
  for (;;) {
    body = lstrip(body);
    if (body.starts_with(kFunctionEnd)) {
      body.remove_prefix(kFunctionEnd.size());
      break;
    }
    if (!body.starts_with(kParam)) return std::nullopt;
    body.remove_prefix(kParam.size());
    std::string param;
    if (!read_name(body, &param)) return std::nullopt;
    const size_t end = body.find(kParamEnd);
    if (end == std::string_view::npos) return std::nullopt;
    std::string_view value = body.substr(0, end);
    if (value.starts_with('\n')) value.remove_prefix(1);
    if (value.ends_with('\n')) value.remove_suffix(1);
    arguments[param] = typed_value(std::string(value), declared_type(tools, call.name, param));
    body.remove_prefix(end + kParamEnd.size());
  }
  if (!trim(body).empty()) return std::nullopt;
  call.arguments_json = dump(arguments);
  return call;
}

std::optional<ParsedCall> parse_body(std::string_view body, const ojson& tools) {
  body = trim(body);
  if (body.starts_with('{')) return parse_json_body(body);
  return parse_xml_body(body, tools);
}

}  // namespace

nlohmann::json ToolCall::to_json() const {
  return {{"id", id}, {"type", "function"}, {"function", {{"name", name}, {"arguments", arguments_json}}}};
}

nlohmann::json ToolCall::to_delta_json() const {
  nlohmann::json j = to_json();
  j["index"] = index;
  return j;
}

ToolCallParser::ToolCallParser(nlohmann::ordered_json tools) : tools_(std::move(tools)) {}

ToolCallDelta ToolCallParser::feed(std::string_view delta) {
  ToolCallDelta out;
  pending_.append(delta);
  for (;;) {
    if (!in_span_) {
      const size_t open = pending_.find(kOpen);
      const size_t release = open != std::string::npos ? open : pending_.size() - marker_prefix_suffix(pending_, kOpen);
      out.content += content_trim_.feed(std::string_view(pending_).substr(0, release));
      if (open == std::string::npos) {
        pending_.erase(0, release);
        return out;
      }
      pending_.erase(0, open + kOpen.size());
      in_span_ = true;
    } else {
      const size_t close = pending_.find(kClose);
      if (close == std::string::npos) return out;
      close_span(std::string_view(pending_).substr(0, close), /*closed=*/true, out);
      pending_.erase(0, close + kClose.size());
      in_span_ = false;
    }
  }
}

ToolCallDelta ToolCallParser::finish() {
  ToolCallDelta out;
  if (in_span_) {
    close_span(pending_, /*closed=*/false, out);
  } else {
    out.content += content_trim_.feed(pending_);
  }
  pending_.clear();
  in_span_ = false;
  content_trim_.end_span();
  return out;
}

void ToolCallParser::close_span(std::string_view body, bool closed, ToolCallDelta& out) {
  std::optional<ParsedCall> call = parse_body(body, tools_);
  if (!call) {
    std::string text(kOpen);
    text.append(body);
    if (closed) text.append(kClose);
    out.content += content_trim_.feed(text);
    return;
  }
  out.tool_calls.push_back(ToolCall{next_index_++, new_call_id(), std::move(call->name), std::move(call->arguments_json)});
}

}  // namespace kiln
