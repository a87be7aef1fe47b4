// The JSON Schema compiler: one walk over the schema that builds grammar rules. Objects, arrays
// and properties become rules named by their JSON pointer (the automaton compiler inlines those
// used once); $ref targets become rules first, so recursive schemas are recursive rules. Values
// are written as a compact serialiser writes them, with bounded whitespace between tokens.
#include "grammar/json_schema.h"

#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "core/json_text.h"
#include "grammar/codepoints.h"
#include "grammar/json_numbers.h"
#include "grammar/regex_grammar.h"
#include "tokenizer/utf8.h"

namespace kiln::grammar {

namespace {

using json = nlohmann::ordered_json;

constexpr int64_t kMaxCount = 10000;            // minItems, maxItems, minLength, maxLength
constexpr int64_t kMaxBound = int64_t{1} << 53;  // number bounds: exact in a double
constexpr int kMaxRefDepth = 256;

// Keywords that only describe: they never narrow what validates, so they are ignored.
const std::set<std::string_view> kAnnotations = {
    "$schema", "$id", "$comment", "$anchor", "title", "description", "default", "examples",
    "deprecated", "readOnly", "writeOnly", "$defs", "definitions"};

// Keywords of JSON Schema that this compiler cannot express.
const std::set<std::string_view> kUnsupported = {
    "multipleOf", "not", "if", "then", "else", "oneOf", "patternProperties", "propertyNames",
    "minProperties", "maxProperties", "dependentRequired", "dependentSchemas", "dependencies",
    "uniqueItems", "contains", "minContains", "maxContains", "unevaluatedProperties",
    "unevaluatedItems", "additionalItems", "contentMediaType", "contentEncoding", "contentSchema",
    "$dynamicRef", "$dynamicAnchor", "$recursiveRef", "$recursiveAnchor", "$vocabulary"};

const std::set<std::string_view> kSupported = {
    "type", "enum", "const", "properties", "required", "additionalProperties", "items",
    "prefixItems", "minItems", "maxItems", "anyOf", "allOf", "$ref", "minLength", "maxLength",
    "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

const std::set<std::string_view> kObjectKeywords = {"properties", "required", "additionalProperties"};
const std::set<std::string_view> kArrayKeywords = {"items", "prefixItems", "minItems", "maxItems"};
const std::set<std::string_view> kStringKeywords = {"minLength", "maxLength", "pattern", "format"};
const std::set<std::string_view> kNumberKeywords = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// Regular forms of the string formats this compiler knows (RFC 3339 dates, times and durations,
// UUIDs, IPv4 and IPv6, host names, e-mail addresses and URIs in a conservative subset).
std::optional<std::string> format_pattern(std::string_view format) {
  static const std::string kDate = "[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])";
  static const std::string kTime =
      "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])";
  // Labels of at most 32 characters, at most seven of them: within the 253 a host name may have.
  static const std::string kLabel = "[A-Za-z0-9]([A-Za-z0-9-]{0,30}[A-Za-z0-9])?";
  static const std::string kOctet = "(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])";
  if (format == "date") return kDate;
  if (format == "time") return kTime;
  if (format == "date-time") return kDate + "T" + kTime;
  if (format == "duration") {  // RFC 3339's ISO 8601 durations, at most nine digits a figure
    const std::string n = "[0-9]{1,9}";
    const std::string time = "T(" + n + "H(" + n + "M(" + n + "S)?)?|" + n + "M(" + n + "S)?|" + n + "S)";
    const std::string date = "(" + n + "D|" + n + "M(" + n + "D)?|" + n + "Y(" + n + "M(" + n + "D)?)?)";
    return "P(" + date + "(" + time + ")?|" + time + "|" + n + "W)";
  }
  if (format == "ipv6") {  // the eight-group form and every "::" abbreviation (no embedded IPv4)
    const std::string h = "[0-9a-fA-F]{1,4}";
    std::string alternatives = "(" + h + ":){7}" + h + "|(" + h + ":){1,7}:|:(:" + h + "){1,7}|::";
    for (int left = 1; left <= 6; ++left) {
      alternatives += "|(" + h + ":){" + std::to_string(left) + "}(:" + h + "){1," + std::to_string(7 - left) + "}";
    }
    return "(" + alternatives + ")";
  }
  if (format == "uuid") return "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}";
  if (format == "ipv4") return "(" + kOctet + "\\.){3}" + kOctet;
  if (format == "hostname") return kLabel + "(\\." + kLabel + "){0,6}";
  if (format == "email") {
    // A local part within the 64 characters allowed, then a host name.
    return "[A-Za-z0-9_+-]{1,16}(\\.[A-Za-z0-9_+-]{1,15}){0,2}@" + kLabel + "(\\." + kLabel + "){0,3}\\.[A-Za-z]{2,6}";
  }
  if (format == "uri") return "[A-Za-z][A-Za-z0-9+.-]{0,15}:([A-Za-z0-9._~:/?#@!$&'()*+,;=-]|%[0-9A-Fa-f]{2})+";
  return std::nullopt;
}


// A value's compact JSON text (invalid UTF-8 in a string, possible only in a document built in
// code, becomes U+FFFD rather than an exception).
std::string dumped(const nlohmann::ordered_json& v) { return v.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace); }

// How a path is shown: the root is "/", others their pointer.
std::string shown(const std::string& path) { return path.empty() ? "/" : path; }

class SchemaCompiler {
 public:
  SchemaCompiler(Grammar& g, const json& root, const JsonSchemaOptions& options) : root_(root), o_(options), g_(g) {}

  Status check_options() const {
    if (o_.max_whitespace < 0) return invalid_argument("max_whitespace must be at least 0");
    if (o_.max_digits < 1 || o_.max_digits > 18) return invalid_argument("max_digits must be within 1..18");
    return {};
  }

  Status compile() {
    KILN_RETURN_IF_ERROR(check_options());
    const RuleId root = g_.add_rule("root");
    g_.set_root(root);
    KILN_ASSIGN_OR_RETURN(const ExprId body, value(root_, ""));
    g_.set_body(root, body);
    return {};
  }

  void any_value_grammar() {
    const RuleId root = g_.add_rule("root");
    g_.set_root(root);
    g_.set_body(root, g_.ref(any_value_rule()));
  }

  // The expression of a part of the root schema (JsonSchemaExprs).
  Result<ExprId> value_at(const json& s, const std::string& path) { return value(s, path); }

 private:
  // --- shared pieces -------------------------------------------------------------------------

  ExprId ws() {
    ByteSet space = ByteSet::of(' ');
    space.add('\t');
    space.add('\n');
    space.add('\r');
    return g_.repeat(g_.bytes(space), 0, o_.max_whitespace);
  }

  ExprId string_char() { return encode_chars(g_, CodepointSet::any(), CharEncoding::kJsonString); }

  ExprId quoted(ExprId content) { return g_.seq({g_.byte('"'), content, g_.byte('"')}); }

  RuleId shared_rule(RuleId& slot, const char* name) {
    if (slot < 0) slot = g_.add_rule(name);
    return slot;
  }

  RuleId string_rule() {
    if (string_rule_ >= 0) return string_rule_;
    const RuleId r = shared_rule(string_rule_, "string");
    g_.set_body(r, quoted(g_.star(string_char())));
    return r;
  }

  RuleId number_rule() {
    if (number_rule_ >= 0) return number_rule_;
    const RuleId r = shared_rule(number_rule_, "number");
    g_.set_body(r, json_number(g_, o_.max_digits));
    return r;
  }

  // Any JSON value, through the rules "value", "object" and "array".
  RuleId any_value_rule() {
    if (value_rule_ >= 0) return value_rule_;
    const RuleId value = shared_rule(value_rule_, "value");
    const RuleId object = g_.add_rule("object");
    const RuleId array = g_.add_rule("array");
    const ExprId v = g_.ref(value);
    const ExprId member = g_.seq({g_.ref(string_rule()), ws(), g_.byte(':'), ws(), v, ws()});
    g_.set_body(object, g_.seq({g_.byte('{'), ws(),
                                g_.optional(g_.seq({member, g_.star(g_.seq({g_.byte(','), ws(), member}))})),
                                g_.byte('}')}));
    const ExprId element = g_.seq({v, ws()});
    g_.set_body(array, g_.seq({g_.byte('['), ws(),
                               g_.optional(g_.seq({element, g_.star(g_.seq({g_.byte(','), ws(), element}))})),
                               g_.byte(']')}));
    g_.set_body(value, g_.alt({g_.ref(object), g_.ref(array), g_.ref(string_rule()), g_.ref(number_rule()),
                               g_.literal("true"), g_.literal("false"), g_.literal("null")}));
    return value;
  }

  // A rule named by `path` whose body is `body`: the automaton compiler inlines it where it is
  // used once or small, and calls it elsewhere.
  ExprId named(const std::string& path, ExprId body) {
    const RuleId r = g_.add_rule(shown(path));
    g_.set_body(r, body);
    return g_.ref(r);
  }

  // --- checks --------------------------------------------------------------------------------

  Status not_supported(const std::string& path, const std::string& why = "") {
    return unsupported(shown(path) + " is not supported" + (why.empty() ? "" : ": " + why));
  }

  Status check_keywords(const json& s, const std::string& path) {
    for (const auto& [key, v] : s.items()) {
      if (kAnnotations.count(key) || kSupported.count(key)) continue;
      if (kUnsupported.count(key)) return not_supported(path + "/" + pointer_escape(key));
      return not_supported(path + "/" + pointer_escape(key), "not a keyword this compiler knows");
    }
    return {};
  }

  // `keyword` may only be accompanied by annotations (and the keywords in `also`).
  Status only_with(const json& s, const std::string& path, std::string_view keyword, const std::set<std::string_view>& also = {}) {
    for (const auto& [key, v] : s.items()) {
      if (key == keyword || kAnnotations.count(key) || also.count(key)) continue;
      return not_supported(path + "/" + pointer_escape(key), "together with '" + std::string(keyword) + "'");
    }
    return {};
  }

  Result<int64_t> count(const json& s, const std::string& path, const char* key, int64_t fallback) {
    if (!s.contains(key)) return fallback;
    const json& v = s[key];
    const std::string at = path + "/" + key;
    if (!v.is_number_integer() || v.get<int64_t>() < 0) return invalid_argument(at + " must be a non-negative integer");
    if (v.get<int64_t>() > kMaxCount) {
      return unsupported(at + " is not supported above " + std::to_string(kMaxCount) + " (each count unrolls into the grammar)");
    }
    return v.get<int64_t>();
  }

  // --- values --------------------------------------------------------------------------------

  Result<ExprId> value(const json& s, const std::string& path) {
    if (s.is_boolean()) return s.get<bool>() ? g_.ref(any_value_rule()) : g_.alt({});
    if (!s.is_object()) return invalid_argument(shown(path) + " is not a schema (an object or a boolean)");
    KILN_RETURN_IF_ERROR(check_keywords(s, path));
    if (s.contains("$ref")) {
      KILN_RETURN_IF_ERROR(only_with(s, path, "$ref"));
      return reference(s["$ref"], path + "/$ref");
    }
    if (s.contains("allOf")) {
      KILN_RETURN_IF_ERROR(only_with(s, path, "allOf"));
      const json& all = s["allOf"];
      if (!all.is_array() || all.size() != 1) return not_supported(path + "/allOf", "only with exactly one schema");
      return value(all[0], path + "/allOf/0");
    }
    if (s.contains("anyOf")) {
      KILN_RETURN_IF_ERROR(only_with(s, path, "anyOf"));
      const json& any = s["anyOf"];
      if (!any.is_array() || any.empty()) return invalid_argument(path + "/anyOf must be a non-empty array of schemas");
      std::vector<ExprId> options;
      for (size_t i = 0; i < any.size(); ++i) {
        KILN_ASSIGN_OR_RETURN(ExprId e, value(any[i], path + "/anyOf/" + std::to_string(i)));
        options.push_back(e);
      }
      return g_.alt(std::move(options));
    }
    KILN_ASSIGN_OR_RETURN(const std::vector<std::string> types, types_of(s, path));
    if (s.contains("const") || s.contains("enum")) return literals(s, path, types);
    if (types.empty()) return g_.ref(any_value_rule());
    std::vector<ExprId> options;
    for (const std::string& t : types) {
      KILN_ASSIGN_OR_RETURN(ExprId e, typed(s, path, t));
      options.push_back(e);
    }
    return g_.alt(std::move(options));
  }

  // The JSON types `s` allows: its "type", else what its keywords imply; empty for any value.
  Result<std::vector<std::string>> types_of(const json& s, const std::string& path) {
    static const std::set<std::string> kTypes = {"null", "boolean", "integer", "number", "string", "object", "array"};
    std::vector<std::string> types;
    if (s.contains("type")) {
      const json& t = s["type"];
      std::vector<json> list = t.is_array() ? std::vector<json>(t.begin(), t.end()) : std::vector<json>{t};
      for (size_t i = 0; i < list.size(); ++i) {
        std::string at = path + "/type";
        if (t.is_array()) at.append("/").append(std::to_string(i));
        if (!list[i].is_string() || !kTypes.count(list[i].get<std::string>())) {
          return invalid_argument(at + " is not a JSON type (null, boolean, integer, number, string, object, array)");
        }
        types.push_back(list[i].get<std::string>());
      }
      if (types.empty()) return invalid_argument(path + "/type lists no type");
      return types;
    }
    if (s.contains("const") || s.contains("enum")) return types;
    auto uses = [&](const std::set<std::string_view>& family) {
      for (const auto& [key, v] : s.items()) {
        if (family.count(key)) return true;
      }
      return false;
    };
    if (uses(kObjectKeywords)) types.push_back("object");
    if (uses(kArrayKeywords)) types.push_back("array");
    if (uses(kStringKeywords)) types.push_back("string");
    if (uses(kNumberKeywords)) types.push_back("number");
    if (types.size() > 1) {
      return not_supported(shown(path), "keywords of several types without a 'type' that names them");
    }
    return types;  // empty: any value
  }

  Result<ExprId> literals(const json& s, const std::string& path, const std::vector<std::string>& types) {
    const bool is_const = s.contains("const");
    KILN_RETURN_IF_ERROR(only_with(s, path, is_const ? "const" : "enum", {"type"}));
    if (is_const && s.contains("enum")) return not_supported(path + "/enum", "together with 'const'");
    std::vector<json> values;
    if (is_const) {
      values.push_back(s["const"]);
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) return invalid_argument(path + "/enum must be a non-empty array");
      values.assign(s["enum"].begin(), s["enum"].end());
    }
    std::vector<ExprId> options;
    for (const json& v : values) {
      if (s.contains("type") && !has_type(v, types)) continue;  // a value its own type excludes never validates
      options.push_back(g_.literal(dumped(v)));
    }
    if (options.empty()) return invalid_argument(path + "/" + (is_const ? "const" : "enum") + " holds no value of the schema's type");
    return g_.alt(std::move(options));
  }

  static bool has_type(const json& v, const std::vector<std::string>& types) {
    for (const std::string& t : types) {
      if ((t == "null" && v.is_null()) || (t == "boolean" && v.is_boolean()) || (t == "string" && v.is_string()) ||
          (t == "object" && v.is_object()) || (t == "array" && v.is_array()) || (t == "number" && v.is_number()) ||
          (t == "integer" && (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())))) {
        return true;
      }
    }
    return false;
  }

  Result<ExprId> typed(const json& s, const std::string& path, const std::string& type) {
    if (type == "null") return g_.literal("null");
    if (type == "boolean") return g_.alt({g_.literal("true"), g_.literal("false")});
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "string") return string(s, path);
    if (type == "object") return object(s, path);
    return array(s, path);
  }

  // A bound keyword's value; exclusive* as a boolean (draft 4) is refused.
  Result<std::optional<double>> bound(const json& s, const std::string& path, const char* key) {
    if (!s.contains(key)) return std::optional<double>();
    const json& v = s[key];
    const std::string at = path + "/" + key;
    if (v.is_boolean()) return not_supported(at, "a boolean (draft 4) form; give the bound as a number");
    if (!v.is_number()) return invalid_argument(at + " must be a number");
    const double d = v.get<double>();
    if (!(std::fabs(d) <= static_cast<double>(kMaxBound))) {
      return not_supported(at, "bounds beyond 2^53 in magnitude");
    }
    return std::optional<double>(d);
  }

  Result<ExprId> integer(const json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    KILN_ASSIGN_OR_RETURN(auto min, bound(s, path, "minimum"));
    KILN_ASSIGN_OR_RETURN(auto xmin, bound(s, path, "exclusiveMinimum"));
    KILN_ASSIGN_OR_RETURN(auto max, bound(s, path, "maximum"));
    KILN_ASSIGN_OR_RETURN(auto xmax, bound(s, path, "exclusiveMaximum"));
    auto raise = [&](int64_t v) { lo = lo ? std::max(*lo, v) : v; };
    auto lower = [&](int64_t v) { hi = hi ? std::min(*hi, v) : v; };
    if (min) raise(static_cast<int64_t>(std::ceil(*min)));
    if (xmin) raise(static_cast<int64_t>(std::floor(*xmin)) + 1);
    if (max) lower(static_cast<int64_t>(std::floor(*max)));
    if (xmax) lower(static_cast<int64_t>(std::ceil(*xmax)) - 1);
    if (lo && hi && *lo > *hi) return invalid_argument(shown(path) + " bounds leave no integer");
    return json_integer(g_, lo, hi, o_.max_digits);
  }

  Result<ExprId> number(const json& s, const std::string& path) {
    std::optional<NumberBound> lo, hi;
    struct Keyword {
      const char* key;
      bool lower, exclusive;
    };
    for (const Keyword& k : {Keyword{"minimum", true, false}, Keyword{"exclusiveMinimum", true, true},
                             Keyword{"maximum", false, false}, Keyword{"exclusiveMaximum", false, true}}) {
      KILN_ASSIGN_OR_RETURN(auto b, bound(s, path, k.key));
      if (!b) continue;
      if (std::floor(*b) != *b) {
        return not_supported(path + "/" + k.key, "a number's bounds must be whole numbers to be written as a grammar");
      }
      const NumberBound nb{static_cast<int64_t>(*b), k.exclusive};
      std::optional<NumberBound>& slot = k.lower ? lo : hi;
      // Keep the tighter bound; at equal values the exclusive one.
      const bool tighter = !slot || (k.lower ? nb.value > slot->value : nb.value < slot->value) ||
                           (nb.value == slot->value && nb.exclusive);
      if (tighter) slot = nb;
    }
    if (!lo && !hi) return g_.ref(number_rule());
    if (lo && hi && (lo->value > hi->value || (lo->value == hi->value && (lo->exclusive || hi->exclusive)))) {
      return invalid_argument(shown(path) + " bounds leave no number");
    }
    return json_decimal(g_, lo, hi, o_.max_digits);
  }

  Result<ExprId> string(const json& s, const std::string& path) {
    const bool lengths = s.contains("minLength") || s.contains("maxLength");
    if (s.contains("format")) {
      const json& f = s["format"];
      if (!f.is_string()) return invalid_argument(path + "/format must be a string");
      if (s.contains("pattern") || lengths) return not_supported(path + "/format", "together with a pattern or length bounds");
      const auto pattern = format_pattern(f.get<std::string>());
      if (!pattern) return not_supported(path + "/format", "the format '" + f.get<std::string>() + "' is unknown here");
      KILN_ASSIGN_OR_RETURN(ExprId e, regex_expr(g_, *pattern, CharEncoding::kJsonString, RegexScope::kWhole));
      return quoted(e);
    }
    if (s.contains("pattern")) {
      const json& p = s["pattern"];
      if (!p.is_string()) return invalid_argument(path + "/pattern must be a string");
      if (lengths) return not_supported(path + "/pattern", "together with length bounds");
      auto e = regex_expr(g_, p.get<std::string>(), CharEncoding::kJsonString, RegexScope::kSearch);
      if (!e.ok()) return Status(e.status().code(), path + "/pattern: " + e.status().message());
      return quoted(*e);
    }
    if (!lengths) return g_.ref(string_rule());
    KILN_ASSIGN_OR_RETURN(const int64_t min, count(s, path, "minLength", 0));
    KILN_ASSIGN_OR_RETURN(const int64_t max, count(s, path, "maxLength", -1));
    if (max >= 0 && max < min) return invalid_argument(path + "/maxLength is below minLength");
    return quoted(g_.repeat(string_char(), static_cast<int32_t>(min), max < 0 ? Expr::kUnbounded : static_cast<int32_t>(max)));
  }

  // "name" as its key: the name's JSON string, then a colon.
  ExprId member(const std::string& name, ExprId v) {
    return g_.seq({g_.literal(dumped(json(name))), ws(), g_.byte(':'), ws(), v});
  }

  // A key that is any string except `names`: a trie of the names over code points, where every
  // step off the trie (or an end short of a name) leads to the rest of an arbitrary string.
  ExprId key_excluding(const std::vector<std::string>& names) {
    struct Node {
      bool is_name = false;
      std::map<uint32_t, int32_t> kids;
    };
    std::vector<Node> nodes(1);
    for (const std::string& name : names) {
      int32_t at = 0;
      for (size_t i = 0; i < name.size();) {
        size_t len = 0;
        const uint32_t c = static_cast<uint32_t>(utf8::decode(name, i, &len));
        i += len;
        auto it = nodes[at].kids.find(c);
        if (it == nodes[at].kids.end()) {
          nodes.emplace_back();
          it = nodes[at].kids.emplace(c, static_cast<int32_t>(nodes.size() - 1)).first;
        }
        at = it->second;
      }
      nodes[at].is_name = true;
    }
    const ExprId rest = g_.star(string_char());
    std::vector<ExprId> expr(nodes.size());
    for (size_t n = nodes.size(); n-- > 0;) {  // children are made after their parents
      std::vector<ExprId> options;
      if (!nodes[n].is_name) options.push_back(g_.empty());
      CodepointSet kids;
      for (const auto& [c, child] : nodes[n].kids) {
        options.push_back(g_.seq({encode_chars(g_, CodepointSet::of(c), CharEncoding::kJsonString), expr[child]}));
        kids.add(c);
      }
      options.push_back(g_.seq({encode_chars(g_, kids.complement(), CharEncoding::kJsonString), rest}));
      expr[n] = g_.alt(std::move(options));
    }
    return quoted(expr[0]);
  }

  Result<ExprId> object(const json& s, const std::string& path) {
    struct Property {
      std::string name;
      ExprId member;
      bool required = false;
    };
    std::vector<Property> props;
    std::vector<std::string> names;
    if (s.contains("properties")) {
      const json& p = s["properties"];
      if (!p.is_object()) return invalid_argument(path + "/properties must be an object");
      for (const auto& [name, sub] : p.items()) {
        const std::string at = path + "/properties/" + pointer_escape(name);
        KILN_ASSIGN_OR_RETURN(ExprId v, value(sub, at));
        props.push_back(Property{name, named(at, member(name, v)), false});
        names.push_back(name);
      }
    }
    if (s.contains("required")) {
      const json& r = s["required"];
      if (!r.is_array()) return invalid_argument(path + "/required must be an array of property names");
      for (size_t i = 0; i < r.size(); ++i) {
        const std::string at = path + "/required/" + std::to_string(i);
        if (!r[i].is_string()) return invalid_argument(at + " must be a string");
        bool found = false;
        for (Property& p : props) {
          if (p.name == r[i].get<std::string>()) p.required = found = true;
        }
        if (!found) return not_supported(at, "it names '" + r[i].get<std::string>() + "', which properties does not define");
      }
    }
    std::optional<ExprId> extra;  // one more member of any other name
    if (s.contains("additionalProperties")) {
      const json& a = s["additionalProperties"];
      if (!(a.is_boolean() && !a.get<bool>())) {
        const std::string at = path + "/additionalProperties";
        KILN_ASSIGN_OR_RETURN(ExprId v, value(a, at));
        const ExprId key = names.empty() ? g_.ref(string_rule()) : key_excluding(names);
        extra = named(at, g_.seq({key, ws(), g_.byte(':'), ws(), v}));
      }
    }

    // tail[i]: what may follow once some member is written and properties before i are decided.
    const size_t n = props.size();
    std::vector<ExprId> tail(n + 1);
    tail[n] = extra ? g_.star(g_.seq({g_.byte(','), ws(), *extra, ws()})) : g_.empty();
    for (size_t i = n; i-- > 0;) {
      const ExprId item = g_.seq({g_.byte(','), ws(), props[i].member, ws()});
      const ExprId body = g_.seq({props[i].required ? item : g_.optional(item), tail[i + 1]});
      tail[i] = named(path + "/(after " + pointer_escape(props[i].name) + ")", body);
    }
    // The first member written: any property up to the first required one, or another name.
    std::vector<ExprId> first;
    bool any_required = false;
    for (size_t i = 0; i < n && !any_required; ++i) {
      first.push_back(g_.seq({props[i].member, ws(), tail[i + 1]}));
      any_required = props[i].required;
    }
    if (!any_required) {
      if (extra) first.push_back(g_.seq({*extra, ws(), tail[n]}));
      first.push_back(g_.empty());
    }
    return named(path, g_.seq({g_.byte('{'), ws(), g_.alt(std::move(first)), g_.byte('}')}));
  }

  Result<ExprId> array(const json& s, const std::string& path) {
    std::vector<ExprId> prefix;
    if (s.contains("prefixItems")) {
      const json& p = s["prefixItems"];
      if (!p.is_array()) return invalid_argument(path + "/prefixItems must be an array of schemas");
      for (size_t i = 0; i < p.size(); ++i) {
        const std::string at = path + "/prefixItems/" + std::to_string(i);
        KILN_ASSIGN_OR_RETURN(ExprId v, value(p[i], at));
        prefix.push_back(named(at, v));
      }
    }
    std::optional<ExprId> item;
    if (!s.contains("items")) {
      item = g_.ref(any_value_rule());
    } else if (s["items"].is_array()) {
      return not_supported(path + "/items", "as an array (the older tuple form); use prefixItems");
    } else if (!(s["items"].is_boolean() && !s["items"].get<bool>())) {
      KILN_ASSIGN_OR_RETURN(ExprId v, value(s["items"], path + "/items"));
      item = named(path + "/items", v);
    }
    KILN_ASSIGN_OR_RETURN(const int64_t min, count(s, path, "minItems", 0));
    KILN_ASSIGN_OR_RETURN(int64_t max, count(s, path, "maxItems", -1));
    const int64_t k = static_cast<int64_t>(prefix.size());
    if (!item) max = max < 0 ? k : std::min(max, k);
    if (max >= 0 && max < min) return invalid_argument(shown(path) + " allows no array: its item bounds leave none");

    // after: what follows the first element; built backwards from where only items remain.
    auto items_after = [&](int64_t written) -> ExprId {
      if (!item || (max >= 0 && max <= written)) return g_.empty();
      return g_.repeat(g_.seq({g_.byte(','), ws(), *item, ws()}), static_cast<int32_t>(std::max<int64_t>(0, min - written)),
                       max < 0 ? Expr::kUnbounded : static_cast<int32_t>(max - written));
    };
    const int64_t prefix_written = max < 0 ? k : std::min(max, k);
    ExprId after = items_after(std::max<int64_t>(prefix_written, 1));
    for (int64_t i = prefix_written - 1; i >= 1; --i) {
      const ExprId piece = g_.seq({g_.byte(','), ws(), prefix[i], ws(), after});
      after = i < min ? piece : g_.optional(piece);
    }
    ExprId content = g_.empty();
    if (max != 0) {
      const ExprId piece = g_.seq({k > 0 ? prefix[0] : *item, ws(), after});
      content = min >= 1 ? piece : g_.optional(piece);
    }
    return named(path, g_.seq({g_.byte('['), ws(), content, g_.byte(']')}));
  }

  Result<ExprId> reference(const json& ref, const std::string& path) {
    if (!ref.is_string()) return invalid_argument(path + " must be a string");
    const std::string target = ref.get<std::string>();
    if (target.empty() || target[0] != '#') {
      return not_supported(path, "only references inside the schema ('#...') are; '" + target + "' is not one");
    }
    const std::string pointer = target.substr(1);
    auto known = refs_.find(pointer);
    if (known != refs_.end()) return g_.ref(known->second);
    const json* at = &root_;
    size_t i = 0;
    if (!pointer.empty() && pointer[0] != '/') return not_supported(path, "'" + target + "' is not a JSON pointer");
    while (i < pointer.size()) {
      size_t next = pointer.find('/', i + 1);
      if (next == std::string::npos) next = pointer.size();
      std::string token;
      for (size_t j = i + 1; j < next; ++j) {
        if (pointer[j] == '~' && j + 1 < next && (pointer[j + 1] == '0' || pointer[j + 1] == '1')) {
          token.push_back(pointer[++j] == '0' ? '~' : '/');
        } else {
          token.push_back(pointer[j]);
        }
      }
      if (at->is_object() && at->contains(token)) {
        at = &(*at)[token];
      } else if (at->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 token.size() < 10 && std::stoul(token) < at->size()) {
        at = &(*at)[std::stoul(token)];
      } else {
        return invalid_argument(path + " '" + target + "' points at nothing in the schema");
      }
      i = next;
    }
    if (++ref_depth_ > kMaxRefDepth) return not_supported(path, "references nest deeper than " + std::to_string(kMaxRefDepth));
    const RuleId rule = g_.add_rule(target);
    refs_.emplace(pointer, rule);
    KILN_ASSIGN_OR_RETURN(const ExprId body, value(*at, pointer));
    --ref_depth_;
    g_.set_body(rule, body);
    return g_.ref(rule);
  }

  const json& root_;
  JsonSchemaOptions o_;
  Grammar& g_;
  RuleId string_rule_ = -1, number_rule_ = -1, value_rule_ = -1;
  std::map<std::string, RuleId> refs_;
  int ref_depth_ = 0;
};

}  // namespace

std::string pointer_escape(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

Result<Grammar> json_schema_grammar(const nlohmann::ordered_json& schema, const JsonSchemaOptions& options) {
  Grammar g;
  KILN_RETURN_IF_ERROR(SchemaCompiler(g, schema, options).compile());
  return g;
}

struct JsonSchemaExprs::Impl {
  Impl(Grammar& g, const nlohmann::ordered_json& root, const JsonSchemaOptions& options) : compiler(g, root, options) {}
  SchemaCompiler compiler;
};

JsonSchemaExprs::JsonSchemaExprs(Grammar& g, const nlohmann::ordered_json& root, const JsonSchemaOptions& options)
    : impl_(std::make_unique<Impl>(g, root, options)) {}
JsonSchemaExprs::~JsonSchemaExprs() = default;

Result<ExprId> JsonSchemaExprs::of(const nlohmann::ordered_json& schema, const std::string& path) {
  KILN_RETURN_IF_ERROR(impl_->compiler.check_options());
  return impl_->compiler.value_at(schema, path);
}

Result<Grammar> json_schema_grammar(std::string_view schema_text, const JsonSchemaOptions& options) {
  KILN_ASSIGN_OR_RETURN(nlohmann::ordered_json schema, parse_ordered_json(schema_text, "the JSON schema"));
  return json_schema_grammar(schema, options);
}

Grammar any_json_grammar(const JsonSchemaOptions& options) {
  Grammar g;
  const nlohmann::ordered_json none;
  SchemaCompiler(g, none, options).any_value_grammar();
  return g;
}

}  // namespace kiln::grammar
