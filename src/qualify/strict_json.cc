#include "qualify/strict_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>

#include "core/json_text.h"

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

constexpr const char* kTrailingContent = "unexpected content after the document";

std::string overflow_reason(std::string_view lexeme) {
  return "number " + std::string(lexeme) + " overflows or underflows a double";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Builds the JsonValue tree from nlohmann::json::sax_parse events. nlohmann checks the grammar,
// the escapes and UTF-8; this adds what it lets through: duplicate keys, numbers that do not
// round-trip, nesting deeper than kMaxJsonDepth, a byte order mark, bytes after a NUL. Every
// error names the JSON path of the value at fault.
class TreeBuilder {
 public:
  explicit TreeBuilder(std::string_view text) : text_(text) {}

  Result<JsonValue> parse() {
    // nlohmann skips a leading byte order mark and reads a NUL byte as the end of the input.
    if (text_.starts_with("\xEF\xBB\xBF")) return format_error("$: byte order mark before the document (byte 0)");
    if (!nlohmann::json::sax_parse(text_.begin(), text_.end(), this)) return error_;
    if (size_t nul = text_.find('\0'); nul != std::string_view::npos) {
      return format_error(std::string("$: ") + kTrailingContent + " (byte " + std::to_string(nul) + ")");
    }
    return std::move(root_);
  }

  // The json_sax interface.
  bool null() { return add(JsonValue::make_null()); }
  bool boolean(bool b) { return add(JsonValue::make_bool(b)); }
  // Integers come without their text, "-0" as the signed integer 0; a JSON integer has one
  // spelling, so the text is rebuilt for the checks every number gets.
  bool number_integer(int64_t i) { return number(i == 0 ? "-0" : std::to_string(i)); }
  bool number_unsigned(uint64_t u) { return number(std::to_string(u)); }
  bool number_float(double, const std::string& text) { return number(text); }
  bool string(std::string& s) { return add(JsonValue::make_string(std::move(s))); }
  bool binary(nlohmann::json::binary_t&) { return false; }  // binary formats only
  bool start_object(size_t) { return open(JsonValue::make_object()); }
  bool start_array(size_t) { return open(JsonValue::make_array()); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }

  bool key(std::string& key) {
    Frame& f = stack_.back();
    if (f.value.find(key) != nullptr) return fail(json_path_key(f.path, key), "duplicate key \"" + key + "\"");
    f.key = std::move(key);
    f.has_key = true;
    return true;
  }

  // `position` counts the bytes read (the end of the input as one). `token` holds the bytes read
  // since the last string or number began: for a number, that number.
  bool parse_error(size_t position, const std::string& token, const nlohmann::json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 9: syntax error while
    // parsing value - invalid literal; last read: 'tru}'": a context, then the reason.
    const std::string_view what = e.what();
    const size_t dash = what.find(" - ");
    const std::string_view context = what.substr(0, dash);
    std::string reason(what.substr(dash == std::string_view::npos ? 0 : dash + 3));
    const std::string last_read = "; last read: '" + token + "'";
    if (size_t at = reason.find(last_read); at != std::string::npos) reason.erase(at, last_read.size());

    const bool in_value = e.id == 406 || context.ends_with("parsing value");
    const bool in_array = !stack_.empty() && stack_.back().value.is_array();
    const std::string_view from_last = text_.substr(std::min(position - 1, text_.size()));
    std::string path = in_array && !in_value ? stack_.back().path : next_path();
    if (reason.starts_with("unexpected number literal") && is_digit(token[0]) && position > token.size() &&
        is_digit(text_[position - token.size() - 1])) {
      // Only a number "0" or "-0" ends just before a digit.
      path = last_path();
      reason = "leading zeros are not allowed in numbers";
    } else if (done_) {
      path = "$";
      reason = kTrailingContent;
    } else if (e.id == 406) {
      reason = overflow_reason(token);
    } else if (in_value && (from_last.starts_with("NaN") || from_last.starts_with("Infinity"))) {
      reason = "NaN and Infinity are not JSON numbers";
    } else if (in_value && in_array && reason.starts_with("unexpected ']'")) {
      path = stack_.back().path;  // a value was due after a comma
      reason = "trailing comma in array";
    } else if (context.ends_with("object key") && reason.starts_with("unexpected '}'")) {
      reason = "trailing comma in object";
    }
    return fail(path, reason + " (byte " + std::to_string(position - 1) + ")");
  }

 private:
  struct Frame {
    JsonValue value;  // the array or object being filled
    std::string path;
    std::string key;  // of the object member whose value comes next
    bool has_key = false;
  };

  bool fail(const std::string& path, const std::string& reason) {
    error_ = format_error(path + ": " + reason);
    return false;
  }

  // The path of the value that comes next (of the object itself while no key is pending).
  std::string next_path() const {
    if (stack_.empty()) return "$";
    const Frame& f = stack_.back();
    if (f.value.is_array()) return json_path_index(f.path, f.value.array.size());
    return f.has_key ? json_path_key(f.path, f.key) : f.path;
  }

  // The path of the value added last.
  std::string last_path() const {
    if (stack_.empty()) return "$";
    const Frame& f = stack_.back();
    if (f.value.is_array()) return json_path_index(f.path, f.value.array.size() - 1);
    return json_path_key(f.path, f.value.object.back().first);
  }

  // A value's depth is the number of arrays and objects around it.
  bool depth_ok() {
    if (stack_.size() <= static_cast<size_t>(kMaxJsonDepth)) return true;
    return fail(next_path(), "nesting deeper than " + std::to_string(kMaxJsonDepth));
  }

  bool open(JsonValue container) {
    if (!depth_ok()) return false;
    stack_.push_back(Frame{std::move(container), next_path(), "", false});
    return true;
  }

  bool close() {
    JsonValue value = std::move(stack_.back().value);
    stack_.pop_back();
    return add(std::move(value));
  }

  bool add(JsonValue value) {
    if (!depth_ok()) return false;
    if (stack_.empty()) {
      root_ = std::move(value);
      done_ = true;
      return true;
    }
    Frame& f = stack_.back();
    if (f.value.is_array()) {
      f.value.array.push_back(std::move(value));
    } else {
      f.value.object.emplace_back(std::move(f.key), std::move(value));
      f.has_key = false;
    }
    return true;
  }

  bool number(std::string_view lexeme) {
    double value = 0.0;
    auto [ptr, ec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), value);
    if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(value))) {
      // from_chars also reports underflow as out of range; zero in disguise is still fine.
      if (!decimal_of(lexeme).digits.empty()) return fail(next_path(), overflow_reason(lexeme));
      value = 0.0;
    } else if (ec != std::errc() || ptr != lexeme.data() + lexeme.size()) {  // LC_NUMERIC not "C"
      return fail(next_path(), "invalid number " + std::string(lexeme));
    }
    char buf[64];
    auto res = std::to_chars(buf, buf + sizeof buf, value);
    if (!(decimal_of(lexeme) == decimal_of(std::string_view(buf, static_cast<size_t>(res.ptr - buf))))) {
      return fail(next_path(), "number " + std::string(lexeme) + " does not round-trip through a double (reads back as " +
                                   std::string(buf, res.ptr) + ")");
    }
    JsonValue out = JsonValue::make_number(value);
    // -0 stays a double: an int64 has no negative zero, and the writer must give back what it read.
    if (lexeme.find_first_of(".eE") == std::string_view::npos && !(value == 0.0 && std::signbit(value))) {
      int64_t i = 0;
      auto [iptr, iec] = std::from_chars(lexeme.data(), lexeme.data() + lexeme.size(), i);
      if (iec == std::errc() && iptr == lexeme.data() + lexeme.size()) out = JsonValue::make_integer(i);
    }
    return add(std::move(out));
  }

  std::string_view text_;
  std::vector<Frame> stack_;
  JsonValue root_;
  bool done_ = false;
  Status error_;
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

Result<JsonValue> parse_strict_json(std::string_view text) { return TreeBuilder(text).parse(); }

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
