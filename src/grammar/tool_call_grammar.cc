#include "grammar/tool_call_grammar.h"

#include <set>

#include "core/json_text.h"
#include "grammar/codepoints.h"

namespace kiln::grammar {

namespace {

using json = nlohmann::ordered_json;

std::string dumped(const json& v) { return v.dump(-1, ' ', false, json::error_handler_t::replace); }

Status named(const std::string& function, const Status& st) {
  return Status(st.code(), function + ": " + st.message());
}

bool declares_string(const json& schema) {
  if (!schema.is_object() || !schema.contains("type")) return false;
  const json& t = schema["type"];
  if (t.is_string()) return t == "string";
  if (t.is_array())
    for (const json& x : t)
      if (x == "string") return true;
  return false;
}

// A count keyword of a raw-text parameter, or `fallback`.
Result<int32_t> count_of(const json& s, const std::string& path, const char* key, int32_t fallback) {
  if (!s.contains(key)) return fallback;
  const json& v = s[key];
  if (!v.is_number_integer() || v.get<int64_t>() < 0) return invalid_argument(path + "/" + key + " must be a non-negative integer");
  if (v.get<int64_t>() > 10'000) return unsupported(path + "/" + key + " above 10000 is not supported");
  return static_cast<int32_t>(v.get<int64_t>());
}

// The raw text of a string parameter in the XML syntax (the parser keeps it as written).
Result<ExprId> raw_string(Grammar& g, const json& s, const std::string& path) {
  for (const char* k : {"pattern", "format"})
    if (s.contains(k))
      return unsupported(path + "/" + k + " is not supported in the template's XML tool-call syntax (its values are raw text)");
  std::vector<json> literals;
  if (s.contains("const")) literals.push_back(s["const"]);
  if (s.contains("enum")) {
    if (!s["enum"].is_array() || s["enum"].empty()) return invalid_argument(path + "/enum must be a non-empty list");
    for (const json& v : s["enum"]) literals.push_back(v);
  }
  if (!literals.empty()) {
    std::vector<ExprId> options;
    for (const json& v : literals) {
      const std::string text = v.is_string() ? v.get<std::string>() : dumped(v);
      if (text.find('<') != std::string::npos)
        return unsupported(path + ": the value " + dumped(v) + " holds '<', which the XML tool-call syntax cannot carry");
      options.push_back(g.literal(text));
    }
    return g.alt(std::move(options));
  }
  KILN_ASSIGN_OR_RETURN(const int32_t min, count_of(s, path, "minLength", 0));
  KILN_ASSIGN_OR_RETURN(const int32_t max, count_of(s, path, "maxLength", Expr::kUnbounded));
  if (max != Expr::kUnbounded && max < min) return invalid_argument(path + "/maxLength is below minLength");
  const ExprId ch = encode_chars(g, CodepointSet::any().minus(CodepointSet::of('<')), CharEncoding::kUtf8);
  return g.repeat(ch, min, max);
}

Result<ExprId> xml_arguments(Grammar& g, const json& params, const JsonSchemaOptions& options) {
  if (params.is_null()) return g.empty();
  if (!params.is_object()) return invalid_argument("/ must be a JSON Schema object");
  for (const char* k : {"anyOf", "allOf", "oneOf", "$ref", "patternProperties"})
    if (params.contains(k))
      return unsupported(std::string("/") + k + " is not supported at the top of parameters in the XML tool-call syntax");
  if (params.contains("type") && params["type"] != "object") return invalid_argument("/type must be \"object\"");
  JsonSchemaExprs exprs(g, params, options);
  std::set<std::string> required;
  if (params.contains("required")) {
    if (!params["required"].is_array()) return invalid_argument("/required must be a list of names");
    for (const json& r : params["required"])
      if (r.is_string()) required.insert(r.get<std::string>());
  }
  std::vector<ExprId> parts;
  if (params.contains("properties")) {
    const json& props = params["properties"];
    if (!props.is_object()) return invalid_argument("/properties must be an object");
    for (const auto& [name, schema] : props.items()) {
      const std::string path = "/properties/" + pointer_escape(name);
      if (name.empty() || name.find_first_of("<>\n") != std::string::npos)
        return unsupported(path + ": the name cannot be written in the XML tool-call syntax");
      ExprId value;
      if (declares_string(schema)) {
        KILN_ASSIGN_OR_RETURN(value, raw_string(g, schema, path));
      } else {
        KILN_ASSIGN_OR_RETURN(value, exprs.of(schema, path));
      }
      const ExprId param = g.seq({g.literal("<parameter=" + name + ">\n"), value, g.literal("\n</parameter>\n")});
      parts.push_back(required.count(name) ? param : g.optional(param));
    }
  }
  for (const std::string& r : required)
    if (!params.contains("properties") || !params["properties"].contains(r))
      return invalid_argument("/required names '" + r + "', which /properties does not declare");
  return g.seq(std::move(parts));
}

Result<ExprId> one_call(Grammar& g, ToolCallSyntax syntax, const ToolCallFunction& f, const JsonSchemaOptions& options) {
  if (f.name.empty()) return invalid_argument("a function has no name");
  if (syntax == ToolCallSyntax::kJson) {
    const json params = f.parameters.is_null() ? json{{"type", "object"}, {"properties", json::object()}} : f.parameters;
    JsonSchemaExprs exprs(g, params, options);
    auto args = exprs.of(params, "");
    if (!args.ok()) return named(f.name, args.status());
    return g.seq({g.literal("<tool_call>\n{\"name\": " + dumped(json(f.name)) + ", \"arguments\": "), *args,
                  g.literal("}\n</tool_call>")});
  }
  if (f.name.find_first_of("<>\n") != std::string::npos)
    return invalid_argument(f.name + ": the name cannot be written in the XML tool-call syntax");
  auto args = xml_arguments(g, f.parameters, options);
  if (!args.ok()) return named(f.name, args.status());
  return g.seq({g.literal("<tool_call>\n<function=" + f.name + ">\n"), *args, g.literal("</function>\n</tool_call>")});
}

}  // namespace

Result<Grammar> tool_call_grammar(ToolCallSyntax syntax, const std::vector<ToolCallFunction>& functions, bool parallel,
                                  const JsonSchemaOptions& options) {
  if (functions.empty()) return invalid_argument("no function to call");
  Grammar g;
  const RuleId root = g.add_rule("root");
  const RuleId call = g.add_rule("tool-call");
  g.set_root(root);
  std::vector<ExprId> calls;
  for (const ToolCallFunction& f : functions) {
    KILN_ASSIGN_OR_RETURN(const ExprId c, one_call(g, syntax, f, options));
    calls.push_back(c);
  }
  g.set_body(call, g.alt(std::move(calls)));
  const ExprId first = g.ref(call);
  if (!parallel) {
    g.set_body(root, first);
  } else {
    const ExprId more = g.repeat(g.seq({g.byte('\n'), g.ref(call)}), 0, kMaxParallelToolCalls - 1);
    g.set_body(root, g.seq({first, more}));
  }
  return g;
}

std::string tool_call_spec_text(ToolCallSyntax syntax, const std::vector<ToolCallFunction>& functions, bool parallel) {
  json fns = json::array();
  for (const ToolCallFunction& f : functions) fns.push_back({{"name", f.name}, {"parameters", f.parameters}});
  return dumped({{"syntax", syntax == ToolCallSyntax::kXml ? "xml" : "json"}, {"parallel", parallel}, {"functions", fns}});
}

Result<Grammar> tool_call_grammar_of_spec(std::string_view text, const JsonSchemaOptions& options) {
  KILN_ASSIGN_OR_RETURN(const json spec, parse_ordered_json(text, "a tool-call grammar spec"));
  if (!spec.is_object() || !spec.contains("functions") || !spec["functions"].is_array())
    return invalid_argument("a tool-call grammar spec needs \"functions\"");
  std::vector<ToolCallFunction> fns;
  for (const json& f : spec["functions"]) {
    if (!f.is_object() || !f.contains("name") || !f["name"].is_string())
      return invalid_argument("a tool-call grammar spec's function needs a \"name\"");
    fns.push_back({f["name"].get<std::string>(), f.value("parameters", json())});
  }
  const ToolCallSyntax syntax = spec.value("syntax", "json") == "xml" ? ToolCallSyntax::kXml : ToolCallSyntax::kJson;
  return tool_call_grammar(syntax, fns, spec.value("parallel", false), options);
}

}  // namespace kiln::grammar
