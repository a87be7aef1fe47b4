#include "qualify/strict_json.h"

#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

namespace kiln::qualify {

JsonValue::JsonValue() = default;

const char* json_type_name(JsonType type) {
  switch (type) {
    case JsonType::kNull: return "null";
    case JsonType::kBool: return "boolean";
    case JsonType::kNumber: return "number";
    case JsonType::kString: return "string";
    case JsonType::kArray: return "array";
    case JsonType::kObject: return "object";
  }
  return "unknown";
}

const JsonValue* JsonValue::find(std::string_view key) const {
  if (type != JsonType::kObject) return nullptr;
  for (const auto& [k, v] : object) {
    if (k == key) return &v;
  }
  return nullptr;
}

JsonValue JsonValue::make_bool(bool b) {
  JsonValue v;
  v.type = JsonType::kBool;
  v.boolean = b;
  return v;
}

JsonValue JsonValue::make_number(double d) {
  JsonValue v;
  v.type = JsonType::kNumber;
  v.number = d;
  return v;
}

JsonValue JsonValue::make_integer(int64_t i) {
  JsonValue v;
  v.type = JsonType::kNumber;
  v.number = static_cast<double>(i);
  v.is_integer = true;
  v.integer = i;
  return v;
}

JsonValue JsonValue::make_string(std::string s) {
  JsonValue v;
  v.type = JsonType::kString;
  v.string = std::move(s);
  return v;
}

bool json_equal(const JsonValue& a, const JsonValue& b) {
  if (a.type != b.type) return false;
  switch (a.type) {
    case JsonType::kNull: return true;
    case JsonType::kBool: return a.boolean == b.boolean;
    case JsonType::kNumber:
      if (a.is_integer && b.is_integer) return a.integer == b.integer;
      return a.number == b.number;
    case JsonType::kString: return a.string == b.string;
    case JsonType::kArray:
      if (a.array.size() != b.array.size()) return false;
      for (size_t i = 0; i < a.array.size(); ++i) {
        if (!json_equal(a.array[i], b.array[i])) return false;
      }
      return true;
    case JsonType::kObject:
      if (a.object.size() != b.object.size()) return false;
      for (const auto& [k, v] : a.object) {
        const JsonValue* other = b.find(k);
        if (other == nullptr || !json_equal(v, *other)) return false;
      }
      return true;
  }
  return false;
}

std::string json_path_key(const std::string& parent, std::string_view key) {
  bool identifier = !key.empty() && !(key[0] >= '0' && key[0] <= '9');
  for (char c : key) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) identifier = false;
  }
  if (identifier) return parent + "." + std::string(key);
  std::string quoted = parent + "[\"";
  for (char c : key) {
    if (c == '"' || c == '\\') quoted += '\\';
    quoted += c;
  }
  return quoted + "\"]";
}

std::string json_path_index(const std::string& parent, size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

namespace {

constexpr int kMaxDepth = 64;

// A decimal number reduced to sign, significant digits and a power of ten, so that two
// spellings of the same value compare equal ("1.50e1" and "15").
struct DecimalValue {
  bool negative = false;
  std::string digits;  // no leading or trailing zeros; empty for zero
  int64_t exponent = 0;
  bool operator==(const DecimalValue& o) const {
    if (digits.empty() && o.digits.empty()) return true;  // -0 == 0
    return negative == o.negative && digits == o.digits && exponent == o.exponent;
  }
};

// `text` is already known to match the JSON number grammar (or to_chars output).
DecimalValue decimal_of(std::string_view text) {
  DecimalValue d;
  size_t i = 0;
  if (i < text.size() && text[i] == '-') {
    d.negative = true;
    ++i;
  }
  std::string digits;
  int64_t frac_len = 0;
  bool in_frac = false;
  for (; i < text.size() && text[i] != 'e' && text[i] != 'E'; ++i) {
    if (text[i] == '.') {
      in_frac = true;
      continue;
    }
    digits += text[i];
    if (in_frac) ++frac_len;
  }
  int64_t exp = 0;
  if (i < text.size()) {
    ++i;
    bool neg = false;
    if (text[i] == '+' || text[i] == '-') neg = text[i++] == '-';
    for (; i < text.size(); ++i) {
      if (exp < 1'000'000'000) exp = exp * 10 + (text[i] - '0');
    }
    if (neg) exp = -exp;
  }
  size_t first = digits.find_first_not_of('0');
  if (first == std::string::npos) return d;  // zero
  digits.erase(0, first);
  exp -= frac_len;
  while (!digits.empty() && digits.back() == '0') {
    digits.pop_back();
    ++exp;
  }
  d.digits = std::move(digits);
  d.exponent = exp;
  return d;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

class Parser {
 public:
  explicit Parser(std::string_view text) : text_(text) {}

  Result<JsonValue> parse_document() {
    JsonValue root;
    skip_ws();
    KILN_RETURN_IF_ERROR(parse_value("$", 0, root));
    skip_ws();
    if (pos_ != text_.size()) return fail("$", "unexpected content after the document");
    return root;
  }

 private:
  Status fail(const std::string& path, const std::string& reason) const {
    return format_error(path + ": " + reason + " (byte " + std::to_string(pos_) + ")");
  }

  void skip_ws() {
    while (pos_ < text_.size() &&
           (text_[pos_] == ' ' || text_[pos_] == '\t' || text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }

  bool consume_literal(std::string_view lit) {
    if (text_.substr(pos_, lit.size()) == lit) {
      pos_ += lit.size();
      return true;
    }
    return false;
  }

  Status parse_value(const std::string& path, int depth, JsonValue& out) {
    if (depth > kMaxDepth) return fail(path, "nesting deeper than " + std::to_string(kMaxDepth));
    if (pos_ >= text_.size()) return fail(path, "unexpected end of input");
    char c = text_[pos_];
    if (c == '{') return parse_object(path, depth, out);
    if (c == '[') return parse_array(path, depth, out);
    if (c == '"') {
      out.type = JsonType::kString;
      return parse_string(path, out.string);
    }
    if (consume_literal("true")) {
      out = JsonValue::make_bool(true);
      return Status::ok_status();
    }
    if (consume_literal("false")) {
      out = JsonValue::make_bool(false);
      return Status::ok_status();
    }
    if (consume_literal("null")) {
      out = JsonValue::make_null();
      return Status::ok_status();
    }
    if (c == '-' || (c >= '0' && c <= '9')) return parse_number(path, out);
    if (text_.substr(pos_, 3) == "NaN" || text_.substr(pos_, 8) == "Infinity" ||
        text_.substr(pos_, 9) == "-Infinity") {
      return fail(path, "NaN and Infinity are not JSON numbers");
    }
    return fail(path, std::string("unexpected character '") + c + "'");
  }

  Status parse_object(const std::string& path, int depth, JsonValue& out) {
    out.type = JsonType::kObject;
    ++pos_;  // '{'
    skip_ws();
    if (pos_ < text_.size() && text_[pos_] == '}') {
      ++pos_;
      return Status::ok_status();
    }
    while (true) {
      skip_ws();
      if (pos_ >= text_.size() || text_[pos_] != '"') return fail(path, "expected a string key");
      std::string key;
      KILN_RETURN_IF_ERROR(parse_string(path, key));
      std::string child = json_path_key(path, key);
      if (out.find(key) != nullptr) return fail(child, "duplicate key \"" + key + "\"");
      skip_ws();
      if (pos_ >= text_.size() || text_[pos_] != ':') return fail(child, "expected ':' after key");
      ++pos_;
      skip_ws();
      JsonValue value;
      KILN_RETURN_IF_ERROR(parse_value(child, depth + 1, value));
      out.object.emplace_back(std::move(key), std::move(value));
      skip_ws();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_ws();
        if (pos_ < text_.size() && text_[pos_] == '}') return fail(path, "trailing comma in object");
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == '}') {
        ++pos_;
        return Status::ok_status();
      }
      return fail(path, "expected ',' or '}' in object");
    }
  }

  Status parse_array(const std::string& path, int depth, JsonValue& out) {
    out.type = JsonType::kArray;
    ++pos_;  // '['
    skip_ws();
    if (pos_ < text_.size() && text_[pos_] == ']') {
      ++pos_;
      return Status::ok_status();
    }
    while (true) {
      skip_ws();
      JsonValue value;
      KILN_RETURN_IF_ERROR(parse_value(json_path_index(path, out.array.size()), depth + 1, value));
      out.array.push_back(std::move(value));
      skip_ws();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_ws();
        if (pos_ < text_.size() && text_[pos_] == ']') return fail(path, "trailing comma in array");
        continue;
      }
      if (pos_ < text_.size() && text_[pos_] == ']') {
        ++pos_;
        return Status::ok_status();
      }
      return fail(path, "expected ',' or ']' in array");
    }
  }

  Status parse_hex4(const std::string& path, uint32_t& out) {
    if (pos_ + 4 > text_.size()) return fail(path, "truncated \\u escape");
    out = 0;
    for (int i = 0; i < 4; ++i) {
      char c = text_[pos_++];
      out <<= 4;
      if (c >= '0' && c <= '9') out |= static_cast<uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') out |= static_cast<uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') out |= static_cast<uint32_t>(c - 'A' + 10);
      else return fail(path, "invalid hex digit in \\u escape");
    }
    return Status::ok_status();
  }

  static void append_utf8(uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  // Validates one UTF-8 sequence starting at pos_ and appends it.
  Status copy_utf8(const std::string& path, std::string& out) {
    auto lead = static_cast<unsigned char>(text_[pos_]);
    size_t len = 0;
    uint32_t cp = 0;
    if (lead >= 0xC2 && lead <= 0xDF) { len = 2; cp = lead & 0x1F; }
    else if (lead >= 0xE0 && lead <= 0xEF) { len = 3; cp = lead & 0x0F; }
    else if (lead >= 0xF0 && lead <= 0xF4) { len = 4; cp = lead & 0x07; }
    else return fail(path, "invalid UTF-8");
    if (pos_ + len > text_.size()) return fail(path, "invalid UTF-8");
    for (size_t i = 1; i < len; ++i) {
      auto c = static_cast<unsigned char>(text_[pos_ + i]);
      if (!is_continuation(c)) return fail(path, "invalid UTF-8");
      cp = (cp << 6) | (c & 0x3F);
    }
    bool overlong = (len == 3 && cp < 0x800) || (len == 4 && cp < 0x10000);
    if (overlong || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return fail(path, "invalid UTF-8");
    out.append(text_.substr(pos_, len));
    pos_ += len;
    return Status::ok_status();
  }

  Status parse_string(const std::string& path, std::string& out) {
    ++pos_;  // opening quote
    while (true) {
      if (pos_ >= text_.size()) return fail(path, "unterminated string");
      auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        ++pos_;
        return Status::ok_status();
      }
      if (c < 0x20) return fail(path, "unescaped control character in string");
      if (c >= 0x80) {
        KILN_RETURN_IF_ERROR(copy_utf8(path, out));
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      ++pos_;
      if (pos_ >= text_.size()) return fail(path, "unterminated escape");
      char e = text_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = 0;
          KILN_RETURN_IF_ERROR(parse_hex4(path, cp));
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            if (text_.substr(pos_, 2) != "\\u") return fail(path, "unpaired surrogate in \\u escape");
            pos_ += 2;
            uint32_t low = 0;
            KILN_RETURN_IF_ERROR(parse_hex4(path, low));
            if (low < 0xDC00 || low > 0xDFFF) return fail(path, "unpaired surrogate in \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
            return fail(path, "unpaired surrogate in \\u escape");
          }
          append_utf8(cp, out);
          break;
        }
        default: return fail(path, std::string("invalid escape '\\") + e + "'");
      }
    }
  }

  Status parse_number(const std::string& path, JsonValue& out) {
    size_t start = pos_;
    auto digit = [&](size_t p) { return p < text_.size() && text_[p] >= '0' && text_[p] <= '9'; };
    if (text_[pos_] == '-') ++pos_;
    if (text_.substr(pos_, 8) == "Infinity") return fail(path, "NaN and Infinity are not JSON numbers");
    if (!digit(pos_)) return fail(path, "invalid number");
    if (text_[pos_] == '0' && digit(pos_ + 1)) return fail(path, "leading zeros are not allowed in numbers");
    while (digit(pos_)) ++pos_;
    bool integral = true;
    if (pos_ < text_.size() && text_[pos_] == '.') {
      integral = false;
      ++pos_;
      if (!digit(pos_)) return fail(path, "invalid number: no digits after '.'");
      while (digit(pos_)) ++pos_;
    }
    if (pos_ < text_.size() && (text_[pos_] == 'e' || text_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '+' || text_[pos_] == '-')) ++pos_;
      if (!digit(pos_)) return fail(path, "invalid number: no digits in exponent");
      while (digit(pos_)) ++pos_;
    }
    std::string_view lexeme = text_.substr(start, pos_ - start);
    double value = 0.0;
    auto [ptr, ec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), value);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(value))) {
      // from_chars also reports underflow as out of range; zero in disguise is still fine.
      if (decimal_of(lexeme).digits.empty()) {
        value = 0.0;
      } else {
        return fail(path, "number " + std::string(lexeme) + " overflows or underflows a double");
      }
    } else if (ec != std::errc() || ptr != lexeme.data() + lexeme.size()) {
      return fail(path, "invalid number " + std::string(lexeme));
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, value);
    if (!(decimal_of(lexeme) == decimal_of(std::string_view(buf, static_cast<size_t>(res.ptr - buf))))) {
      return fail(path, "number " + std::string(lexeme) + " does not round-trip through a double (reads back as " +
                            std::string(buf, res.ptr) + ")");
    }
    out.type = JsonType::kNumber;
    out.number = value;
    // -0 stays a double: an int64 has no negative zero, and the writer must give back what it read.
    if (integral && !(value == 0.0 && std::signbit(value))) {
      int64_t i = 0;
      auto [iptr, iec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), i);
      if (iec == std::errc() && iptr == lexeme.data() + lexeme.size()) {
        out.is_integer = true;
        out.integer = i;
      }
    }
    return Status::ok_status();
  }

  std::string_view text_;
  size_t pos_ = 0;
};

void write_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}

void newline(std::string& out, int indent, int depth) {
  if (indent <= 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}

void write_value(const JsonValue& v, std::string& out, int indent, int depth) {
  switch (v.type) {
    case JsonType::kNull: out += "null"; break;
    case JsonType::kBool: out += v.boolean ? "true" : "false"; break;
    case JsonType::kNumber: {
      if (v.is_integer) {
        out += std::to_string(v.integer);
      } else {
        char buf[64];
        auto res = std::to_chars(buf, buf + sizeof buf, v.number);
        out.append(buf, res.ptr);
      }
      break;
    }
    case JsonType::kString: write_string(v.string, out); break;
    case JsonType::kArray:
      out += '[';
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        write_value(v.array[i], out, indent, depth + 1);
      }
      if (!v.array.empty()) newline(out, indent, depth);
      out += ']';
      break;
    case JsonType::kObject:
      out += '{';
      for (size_t i = 0; i < v.object.size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        write_string(v.object[i].first, out);
        out += indent > 0 ? ": " : ":";
        write_value(v.object[i].second, out, indent, depth + 1);
      }
      if (!v.object.empty()) newline(out, indent, depth);
      out += '}';
      break;
  }
}

}  // namespace

Result<JsonValue> parse_strict_json(std::string_view text) { return Parser(text).parse_document(); }

Result<JsonValue> read_strict_json_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return not_found("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  Result<JsonValue> parsed = parse_strict_json(ss.str());
  if (!parsed.ok()) return parsed.status().with_context(path);
  return parsed;
}

std::string to_json_text(const JsonValue& value, int indent) {
  std::string out;
  write_value(value, out, indent, 0);
  return out;
}

JsonValue JsonValue::make_object() {
  JsonValue v;
  v.type = JsonType::kObject;
  return v;
}

JsonValue JsonValue::make_array() {
  JsonValue v;
  v.type = JsonType::kArray;
  return v;
}

JsonValue& JsonValue::set(std::string key, JsonValue value) {
  for (auto& [k, v] : object) {
    if (k == key) {
      v = std::move(value);
      return *this;
    }
  }
  object.emplace_back(std::move(key), std::move(value));
  return *this;
}

}  // namespace kiln::qualify
