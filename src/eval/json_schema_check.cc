#include "eval/json_schema_check.h"

#include <cmath>

#include "core/regex.h"
#include "eval/json_format.h"

namespace kiln {

namespace {

using json = nlohmann::json;

constexpr int kMaxDepth = 64;  // $ref chains and nesting: a recursive schema stops here

std::string at(const std::string& path) { return path.empty() ? "/" : path; }

size_t characters(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

bool is_type(const json& v, const std::string& type) {
  if (type == "null") return v.is_null();
  if (type == "boolean") return v.is_boolean();
  if (type == "object") return v.is_object();
  if (type == "array") return v.is_array();
  if (type == "string") return v.is_string();
  if (type == "number") return v.is_number();
  if (type == "integer")
    return v.is_number_integer() || (v.is_number_float() && std::isfinite(v.get<double>()) &&
                                     v.get<double>() == std::floor(v.get<double>()));
  return false;
}

class Checker {
 public:
  Checker(const json& root, const JsonSchemaCheckOptions& options) : root_(root), options_(options) {}

  std::optional<std::string> check(const json& s, const json& v, const std::string& path, int depth) {
    if (depth > kMaxDepth) return at(path) + ": the schema nests deeper than " + std::to_string(kMaxDepth);
    if (s.is_boolean()) return s.get<bool>() ? std::nullopt : std::optional<std::string>(at(path) + ": no value is allowed here");
    if (!s.is_object()) return std::nullopt;
    if (s.contains("$ref")) {
      const json* target = resolve(s["$ref"]);
      if (!target) return at(path) + ": $ref " + s["$ref"].dump() + " points at nothing in the schema";
      if (auto e = check(*target, v, path, depth + 1)) return e;
    }
    if (s.contains("type")) {
      const json& t = s["type"];
      bool ok = false;
      if (t.is_string()) ok = is_type(v, t.get<std::string>());
      for (const json& x : t.is_array() ? t : json::array()) ok = ok || (x.is_string() && is_type(v, x.get<std::string>()));
      if (!ok) return at(path) + ": expected type " + t.dump() + ", got " + v.dump().substr(0, 80);
    }
    if (s.contains("const") && v != s["const"]) return at(path) + ": expected " + s["const"].dump().substr(0, 80);
    if (s.contains("enum") && s["enum"].is_array()) {
      bool found = false;
      for (const json& e : s["enum"]) found = found || e == v;
      if (!found) return at(path) + ": not one of " + s["enum"].dump().substr(0, 120);
    }
    for (const char* k : {"allOf", "anyOf", "oneOf"}) {
      if (!s.contains(k) || !s[k].is_array()) continue;
      size_t passed = 0;
      std::optional<std::string> first;
      for (const json& sub : s[k]) {
        auto e = check(sub, v, path, depth + 1);
        if (!e) ++passed;
        else if (!first) first = e;
      }
      if (std::string(k) == "allOf" && first) return first;
      if (std::string(k) == "anyOf" && passed == 0) return at(path) + ": matches none of anyOf (" + first.value_or("") + ")";
      if (std::string(k) == "oneOf" && passed != 1)
        return at(path) + ": matches " + std::to_string(passed) + " of oneOf, not exactly one";
    }
    if (s.contains("not") && !check(s["not"], v, path, depth + 1)) return at(path) + ": matches the schema under not";
    if (v.is_string()) return string(s, v.get<std::string>(), path);
    if (v.is_number()) return number(s, v.get<double>(), path);
    if (v.is_array()) return array(s, v, path, depth);
    if (v.is_object()) return object(s, v, path, depth);
    return std::nullopt;
  }

 private:
  const json* resolve(const json& ref) const {
    if (!ref.is_string()) return nullptr;
    const std::string r = ref.get<std::string>();
    if (r.empty() || r[0] != '#') return nullptr;
    try {
      const json::json_pointer p(r.substr(1));
      return root_.contains(p) ? &root_.at(p) : nullptr;
    } catch (const json::exception&) {
      return nullptr;
    }
  }

  static std::optional<size_t> count(const json& s, const char* key) {
    if (!s.contains(key) || !s[key].is_number_unsigned()) return std::nullopt;
    return s[key].get<size_t>();
  }

  std::optional<std::string> string(const json& s, const std::string& v, const std::string& path) {
    const size_t n = characters(v);
    if (auto m = count(s, "minLength"); m && n < *m) return at(path) + ": shorter than minLength " + std::to_string(*m);
    if (auto m = count(s, "maxLength"); m && n > *m) return at(path) + ": longer than maxLength " + std::to_string(*m);
    if (s.contains("pattern") && s["pattern"].is_string()) {
      auto re = Regex::compile(s["pattern"].get<std::string>());
      if (!re.ok()) return at(path) + ": " + re.status().message();
      auto hit = re->find(v);
      if (!hit.ok()) return at(path) + ": " + hit.status().message();
      if (!*hit) return at(path) + ": does not match pattern " + s["pattern"].dump();
    }
    if (options_.assert_format && s.contains("format") && s["format"].is_string()) {
      const std::string format = s["format"].get<std::string>();
      if (!is_json_format(format)) return at(path) + ": format " + s["format"].dump() + " is not one this check knows";
      if (!json_format_holds(format, v)) return at(path) + ": not a " + format + ": " + json(v).dump().substr(0, 80);
    }
    return std::nullopt;
  }

  std::optional<std::string> number(const json& s, double v, const std::string& path) {
    auto bound = [&](const char* key) -> std::optional<double> {
      if (!s.contains(key) || !s[key].is_number()) return std::nullopt;
      return s[key].get<double>();
    };
    if (auto b = bound("minimum"); b && v < *b) return at(path) + ": below minimum " + s["minimum"].dump();
    if (auto b = bound("maximum"); b && v > *b) return at(path) + ": above maximum " + s["maximum"].dump();
    if (auto b = bound("exclusiveMinimum"); b && v <= *b) return at(path) + ": not above exclusiveMinimum " + s["exclusiveMinimum"].dump();
    if (auto b = bound("exclusiveMaximum"); b && v >= *b) return at(path) + ": not below exclusiveMaximum " + s["exclusiveMaximum"].dump();
    if (auto m = bound("multipleOf"); m && *m > 0) {
      const double q = v / *m;
      if (std::fabs(q - std::round(q)) > 1e-9 * std::max(1.0, std::fabs(q)))
        return at(path) + ": not a multiple of " + s["multipleOf"].dump();
    }
    return std::nullopt;
  }

  std::optional<std::string> array(const json& s, const json& v, const std::string& path, int depth) {
    if (auto m = count(s, "minItems"); m && v.size() < *m) return at(path) + ": fewer than minItems " + std::to_string(*m);
    if (auto m = count(s, "maxItems"); m && v.size() > *m) return at(path) + ": more than maxItems " + std::to_string(*m);
    size_t first = 0;
    if (s.contains("prefixItems") && s["prefixItems"].is_array()) {
      const json& prefix = s["prefixItems"];
      for (; first < prefix.size() && first < v.size(); ++first)
        if (auto e = check(prefix[first], v[first], path + "/" + std::to_string(first), depth + 1)) return e;
    }
    if (s.contains("items"))
      for (size_t i = first; i < v.size(); ++i)
        if (auto e = check(s["items"], v[i], path + "/" + std::to_string(i), depth + 1)) return e;
    if (s.value("uniqueItems", false))
      for (size_t i = 0; i < v.size(); ++i)
        for (size_t j = i + 1; j < v.size(); ++j)
          if (v[i] == v[j]) return at(path) + ": items " + std::to_string(i) + " and " + std::to_string(j) + " are equal";
    if (s.contains("contains")) {
      bool found = false;
      for (const json& x : v) found = found || !check(s["contains"], x, path, depth + 1);
      if (!found) return at(path) + ": no item matches contains";
    }
    return std::nullopt;
  }

  std::optional<std::string> object(const json& s, const json& v, const std::string& path, int depth) {
    if (auto m = count(s, "minProperties"); m && v.size() < *m) return at(path) + ": fewer than minProperties";
    if (auto m = count(s, "maxProperties"); m && v.size() > *m) return at(path) + ": more than maxProperties";
    if (s.contains("required") && s["required"].is_array())
      for (const json& r : s["required"])
        if (r.is_string() && !v.contains(r.get<std::string>())) return at(path) + ": missing required " + r.dump();
    const json none = json::object();
    const json& props = s.contains("properties") && s["properties"].is_object() ? s["properties"] : none;
    const json& patterns = s.contains("patternProperties") && s["patternProperties"].is_object() ? s["patternProperties"] : none;
    for (const auto& [key, value] : v.items()) {
      const std::string p = path + (json::json_pointer() / key).to_string();
      bool declared = false;
      if (props.contains(key)) {
        declared = true;
        if (auto e = check(props[key], value, p, depth + 1)) return e;
      }
      for (const auto& [pattern, sub] : patterns.items()) {
        auto re = Regex::compile(pattern);
        if (!re.ok()) return at(path) + ": " + re.status().message();
        auto hit = re->find(key);
        if (!hit.ok()) return at(path) + ": " + hit.status().message();
        if (!*hit) continue;
        declared = true;
        if (auto e = check(sub, value, p, depth + 1)) return e;
      }
      if (!declared && s.contains("additionalProperties")) {
        if (auto e = check(s["additionalProperties"], value, p, depth + 1))
          return s["additionalProperties"] == false ? at(p) + ": not a declared property" : e;
      }
    }
    return std::nullopt;
  }

  const json& root_;
  const JsonSchemaCheckOptions& options_;
};

}  // namespace

std::optional<std::string> json_schema_violation(const json& schema, const json& value, const JsonSchemaCheckOptions& options) {
  return Checker(schema, options).check(schema, value, "", 0);
}

}  // namespace kiln
