#include "config/config_value.h"

#include <charconv>
#include <cmath>
#include <cstdio>

namespace kiln {

const char* field_type_name(FieldType type) {
  switch (type) {
    case FieldType::kString: return "string";
    case FieldType::kInteger: return "integer";
    case FieldType::kFloat: return "float";
    case FieldType::kBool: return "bool";
    case FieldType::kEnum: return "enum";
  }
  return "unknown";
}

namespace {

// from_chars over the whole text, refusing leading '+', blanks and trailing characters.
template <typename T>
bool parse_whole(std::string_view text, T& out) {
  if (text.empty()) return false;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, out);
  return ec == std::errc() && ptr == end;
}

}  // namespace

Result<ConfigValue> parse_config_value(FieldType type, std::string_view text) {
  std::string quoted = "'";  // appended, not concatenated: GCC 12 warns falsely (-Wrestrict) on "'" + s
  quoted.append(text).push_back('\'');
  switch (type) {
    case FieldType::kString:
    case FieldType::kEnum:
      return ConfigValue(std::string(text));
    case FieldType::kInteger: {
      int64_t v = 0;
      if (!parse_whole(text, v)) {
        double d = 0;  // a well-formed integer too large for int64 deserves its own message
        if (text.find_first_not_of("-0123456789") == std::string_view::npos && parse_whole(text, d))
          return invalid_argument(quoted + " does not fit a 64-bit integer");
        return invalid_argument(quoted + " is not an integer");
      }
      return ConfigValue(v);
    }
    case FieldType::kFloat: {
      double v = 0;
      if (!parse_whole(text, v) || !std::isfinite(v)) return invalid_argument(quoted + " is not a finite number");
      return ConfigValue(v);
    }
    case FieldType::kBool:
      if (text == "true" || text == "1") return ConfigValue(true);
      if (text == "false" || text == "0") return ConfigValue(false);
      return invalid_argument(quoted + " is not a bool (true, false, 1 or 0)");
  }
  return internal_error("unknown field type");
}

std::string format_config_value(const ConfigValue& value) {
  if (const bool* b = std::get_if<bool>(&value)) return *b ? "true" : "false";
  if (const int64_t* i = std::get_if<int64_t>(&value)) return std::to_string(*i);
  if (const double* d = std::get_if<double>(&value)) {
    char buf[64];
    auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, *d);  // shortest round-trip form
    std::string s(buf, ptr);
    if (s.find_first_of(".en") == std::string::npos) s += ".0";  // keep it a TOML float
    return s;
  }
  std::string out = "\"";
  for (unsigned char c : std::get<std::string>(value)) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace kiln
