// A small JSON Schema validator for the grammar tests, written apart from the compiler: it
// checks a parsed value against the keywords the compiler supports, with the standard meaning
// of each (formats by parsing their fields, patterns through PCRE2). Returns "" when the value
// validates, else what failed and where.
#pragma once

#include <arpa/inet.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include <nlohmann/json.hpp>

#include "core/regex.h"

namespace kiln::grammar::testing {

using Json = nlohmann::ordered_json;

inline size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

inline bool all_of_class(const std::string& s, const char* chars) {
  return !s.empty() && s.find_first_not_of(chars) == std::string::npos;
}

inline bool valid_date(const std::string& s) {
  int y = 0, m = 0, d = 0;
  char tail = 0;
  if (s.size() != 10 || std::sscanf(s.c_str(), "%4d-%2d-%2d%c", &y, &m, &d, &tail) != 3) return false;
  return s[4] == '-' && s[7] == '-' && m >= 1 && m <= 12 && d >= 1 && d <= 31;
}

inline bool valid_time(const std::string& s) {
  int h = 0, mi = 0, sec = 0;
  if (s.size() < 9 || std::sscanf(s.c_str(), "%2d:%2d:%2d", &h, &mi, &sec) != 3 || s[2] != ':' || s[5] != ':') return false;
  if (h > 23 || mi > 59 || sec > 59) return false;
  size_t i = 8;
  if (i < s.size() && s[i] == '.') {
    const size_t start = ++i;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
    if (i == start) return false;
  }
  const std::string zone = s.substr(i);
  if (zone == "Z") return true;
  int zh = 0, zm = 0;
  return zone.size() == 6 && (zone[0] == '+' || zone[0] == '-') && zone[3] == ':' &&
         std::sscanf(zone.c_str() + 1, "%2d:%2d", &zh, &zm) == 2 && zh <= 23 && zm <= 59;
}

// RFC 3339's duration: P, then weeks alone, or date figures (Y M D, each optional but in order)
// and/or T with time figures (H M S likewise); at least one figure after P and after T.
inline bool valid_duration(const std::string& s) {
  if (s.size() < 3 || s[0] != 'P') return false;
  size_t i = 1;
  auto figures = [&](const char* units, bool* any) {
    const char* next = units;
    while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) {
      const size_t start = i;
      while (i < s.size() && std::isdigit(static_cast<unsigned char>(s[i]))) ++i;
      if (i == s.size() || i == start) return false;
      const char* unit = std::strchr(next, s[i]);
      if (unit == nullptr || *unit == '\0') return false;
      next = unit + 1;
      *any = true;
      ++i;
    }
    return true;
  };
  bool any_date = false, any_time = false;
  if (s.back() == 'W') return s.size() > 2 && all_of_class(s.substr(1, s.size() - 2), "0123456789");
  if (!figures("YMD", &any_date)) return false;
  if (i < s.size()) {
    if (s[i++] != 'T' || !figures("HMS", &any_time) || !any_time) return false;
  }
  return i == s.size() && (any_date || any_time);
}

inline bool valid_format(const std::string& format, const std::string& s) {
  if (format == "duration") return valid_duration(s);
  if (format == "ipv6") {
    unsigned char out[16];
    return s.find('.') == std::string::npos && inet_pton(AF_INET6, s.c_str(), out) == 1;
  }
  if (format == "date") return valid_date(s);
  if (format == "time") return valid_time(s);
  if (format == "date-time") return s.size() > 11 && s[10] == 'T' && valid_date(s.substr(0, 10)) && valid_time(s.substr(11));
  if (format == "uuid") {
    if (s.size() != 36) return false;
    for (size_t i = 0; i < 36; ++i) {
      const bool dash = i == 8 || i == 13 || i == 18 || i == 23;
      if (dash != (s[i] == '-') || (!dash && !std::isxdigit(static_cast<unsigned char>(s[i])))) return false;
    }
    return true;
  }
  if (format == "ipv4") {
    int parts = 0;
    size_t i = 0;
    while (i <= s.size()) {
      const size_t dot = std::min(s.find('.', i), s.size());
      const std::string octet = s.substr(i, dot - i);
      if (!all_of_class(octet, "0123456789") || octet.size() > 3 || (octet.size() > 1 && octet[0] == '0') || std::stoi(octet) > 255) return false;
      ++parts;
      i = dot + 1;
    }
    return parts == 4;
  }
  const char* kHost = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-.";
  auto valid_host = [&](const std::string& h) {
    if (!all_of_class(h, kHost) || h.size() > 253) return false;
    size_t i = 0;
    while (i <= h.size()) {
      const size_t dot = std::min(h.find('.', i), h.size());
      const std::string label = h.substr(i, dot - i);
      if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
      i = dot + 1;
    }
    return true;
  };
  if (format == "hostname") return valid_host(s);
  if (format == "email") {
    const size_t at = s.find('@');
    if (at == std::string::npos || at == 0 || s.find('@', at + 1) != std::string::npos) return false;
    const std::string local = s.substr(0, at), domain = s.substr(at + 1);
    if (local.size() > 64 || local.front() == '.' || local.back() == '.' || local.find("..") != std::string::npos) return false;
    return all_of_class(local, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-") && valid_host(domain) &&
           domain.find('.') != std::string::npos;
  }
  if (format == "uri") {
    const size_t colon = s.find(':');
    if (colon == std::string::npos || colon == 0 || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
    for (size_t i = colon + 1; i < s.size(); ++i) {
      const unsigned char c = static_cast<unsigned char>(s[i]);
      if (c <= 0x20 || c >= 0x7F || c == '"' || c == '<' || c == '>' || c == '\\' || c == '^' || c == '`' || c == '{' ||
          c == '|' || c == '}') {
        return false;
      }
      if (c == '%' && !(i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
                        std::isxdigit(static_cast<unsigned char>(s[i + 2])))) {
        return false;
      }
    }
    return colon + 1 < s.size();
  }
  return false;
}

inline const Json* resolve(const Json& root, const std::string& ref) {
  const Json* at = &root;
  size_t i = 1;  // past '#'
  while (i < ref.size()) {
    const size_t next = std::min(ref.find('/', i + 1), ref.size());
    const std::string token = ref.substr(i + 1, next - i - 1);
    if (at->is_object() && at->contains(token)) {
      at = &(*at)[token];
    } else if (at->is_array()) {
      at = &(*at)[std::stoul(token)];
    } else {
      return nullptr;
    }
    i = next;
  }
  return at;
}

inline bool has_type(const Json& v, const std::string& t) {
  if (t == "null") return v.is_null();
  if (t == "boolean") return v.is_boolean();
  if (t == "string") return v.is_string();
  if (t == "object") return v.is_object();
  if (t == "array") return v.is_array();
  if (t == "number") return v.is_number();
  if (t == "integer") return v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>());
  return false;
}

inline std::string validate(const Json& v, const Json& s, const Json& root, const std::string& at = "") {
  if (s.is_boolean()) return s.get<bool>() ? "" : at + ": false schema";
  if (s.contains("$ref")) {
    const Json* target = resolve(root, s["$ref"].get<std::string>());
    return target ? validate(v, *target, root, at) : at + ": unresolved $ref";
  }
  for (const char* key : {"allOf"}) {
    if (!s.contains(key)) continue;
    for (const Json& sub : s[key]) {
      if (std::string e = validate(v, sub, root, at); !e.empty()) return e;
    }
  }
  if (s.contains("anyOf")) {
    bool any = false;
    for (const Json& sub : s["anyOf"]) any = any || validate(v, sub, root, at).empty();
    if (!any) return at + ": no anyOf branch";
  }
  if (s.contains("const") && v != s["const"]) return at + ": not the const";
  if (s.contains("enum")) {
    bool found = false;
    for (const Json& e : s["enum"]) found = found || e == v;
    if (!found) return at + ": not in the enum";
  }
  if (s.contains("type")) {
    bool ok = false;
    if (s["type"].is_array()) {
      for (const Json& t : s["type"]) ok = ok || has_type(v, t.get<std::string>());
    } else {
      ok = has_type(v, s["type"].get<std::string>());
    }
    if (!ok) return at + ": wrong type " + v.dump();
  }
  if (v.is_number()) {
    const double x = v.get<double>();
    if (s.contains("minimum") && x < s["minimum"].get<double>()) return at + ": below minimum";
    if (s.contains("maximum") && x > s["maximum"].get<double>()) return at + ": above maximum";
    if (s.contains("exclusiveMinimum") && x <= s["exclusiveMinimum"].get<double>()) return at + ": not above exclusiveMinimum";
    if (s.contains("exclusiveMaximum") && x >= s["exclusiveMaximum"].get<double>()) return at + ": not below exclusiveMaximum";
  }
  if (v.is_string()) {
    const std::string& str = v.get_ref<const std::string&>();
    if (s.contains("minLength") && code_points(str) < s["minLength"].get<size_t>()) return at + ": too short";
    if (s.contains("maxLength") && code_points(str) > s["maxLength"].get<size_t>()) return at + ": too long";
    if (s.contains("pattern")) {
      auto re = Regex::compile(s["pattern"].get<std::string>());
      if (!re.ok()) return at + ": " + re.status().message();
      auto found = re->find(str);
      if (!found.ok() || !found->has_value()) return at + ": does not match the pattern: " + str;
    }
    if (s.contains("format") && !valid_format(s["format"].get<std::string>(), str)) return at + ": not a " + s["format"].get<std::string>() + ": " + str;
  }
  if (v.is_array()) {
    const size_t n = v.size();
    if (s.contains("minItems") && n < s["minItems"].get<size_t>()) return at + ": too few items";
    if (s.contains("maxItems") && n > s["maxItems"].get<size_t>()) return at + ": too many items";
    size_t k = 0;
    if (s.contains("prefixItems")) {
      k = s["prefixItems"].size();
      for (size_t i = 0; i < n && i < k; ++i) {
        if (std::string e = validate(v[i], s["prefixItems"][i], root, at + "/" + std::to_string(i)); !e.empty()) return e;
      }
    }
    if (s.contains("items")) {
      for (size_t i = k; i < n; ++i) {
        if (std::string e = validate(v[i], s["items"], root, at + "/" + std::to_string(i)); !e.empty()) return e;
      }
    }
  }
  if (v.is_object()) {
    if (s.contains("required")) {
      for (const Json& r : s["required"]) {
        if (!v.contains(r.get<std::string>())) return at + ": missing " + r.get<std::string>();
      }
    }
    for (const auto& [key, val] : v.items()) {
      if (s.contains("properties") && s["properties"].contains(key)) {
        if (std::string e = validate(val, s["properties"][key], root, at + "/" + key); !e.empty()) return e;
      } else if (s.contains("additionalProperties")) {
        if (std::string e = validate(val, s["additionalProperties"], root, at + "/" + key); !e.empty()) return e;
      }
    }
  }
  return "";
}

}  // namespace kiln::grammar::testing
