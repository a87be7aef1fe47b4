// Python semantics for template values: truthiness, ==, str(), repr() and json.dumps.
#include "tokenizer/jinja/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include <utf8proc.h>

#include "tokenizer/jinja/template_error.h"
#include "tokenizer/utf8.h"

namespace kiln::jinja {

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    items.emplace_back(key, std::move(value));
  }
}

Value Value::list(std::vector<Value> items, bool tuple) {
  auto l = std::make_shared<List>();
  l->items = std::move(items);
  l->is_tuple = tuple;
  return Value(std::move(l));
}

Value Value::dict() { return Value(std::make_shared<Dict>()); }

Value Value::callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn) {
  auto c = std::make_shared<Callable>();
  c->name = std::move(name);
  c->fn = std::move(fn);
  return Value(std::move(c));
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value(None{});
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u <= static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Value d = dict();
      for (auto it = j.begin(); it != j.end(); ++it) d.as_dict().items.emplace_back(it.key(), from_json(it.value()));
      return d;
    }
    default: return Value(None{});
  }
}

double Value::as_double() const {
  if (is_bool()) return as_bool() ? 1.0 : 0.0;
  if (is_int()) return static_cast<double>(as_int());
  return as_float();
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return as_list().is_tuple ? "tuple" : "list";
  if (is_dict()) return as_dict().is_namespace ? "Namespace" : "dict";
  return "function";
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().items.empty();
  if (is_dict()) return as_dict().is_namespace || !as_dict().items.empty();
  return true;
}

bool Value::equals(const Value& o) const {
  if (is_number() && o.is_number()) {
    if ((is_int() || is_bool()) && (o.is_int() || o.is_bool())) {
      return (is_int() ? as_int() : as_bool()) == (o.is_int() ? o.as_int() : o.as_bool());
    }
    return as_double() == o.as_double();
  }
  if (v_.index() != o.v_.index()) return false;
  if (is_undefined() || is_none()) return true;
  if (is_string()) return as_string() == o.as_string();
  if (is_list()) {
    const List& a = as_list();
    const List& b = o.as_list();
    if (a.is_tuple != b.is_tuple || a.items.size() != b.items.size()) return false;
    for (size_t i = 0; i < a.items.size(); ++i) {
      if (!a.items[i].equals(b.items[i])) return false;
    }
    return true;
  }
  if (is_dict()) {
    const Dict& a = as_dict();
    const Dict& b = o.as_dict();
    if (&a == &b) return true;
    if (a.is_namespace || b.is_namespace || a.items.size() != b.items.size()) return false;
    for (const auto& [k, v] : a.items) {
      const Value* other = b.find(k);
      if (other == nullptr || !v.equals(*other)) return false;
    }
    return true;
  }
  return &as_callable() == &o.as_callable();
}

std::string python_float_repr(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f > 0 ? "inf" : "-inf";
  if (f == 0.0) return std::signbit(f) ? "-0.0" : "0.0";
  char buf[64];
  // Shortest round-trip digits in scientific form: [-]d[.ddd]e[+-]XX.
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f, std::chars_format::scientific);
  std::string sci(buf, end);
  std::string sign;
  if (sci[0] == '-') {
    sign = "-";
    sci.erase(0, 1);
  }
  const size_t epos = sci.find('e');
  const int exponent = std::stoi(sci.substr(epos + 1));
  std::string digits = sci.substr(0, epos);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  if (exponent < -4 || exponent >= 16) {
    std::string mantissa = digits.substr(0, 1);
    if (digits.size() > 1) mantissa += "." + digits.substr(1);
    char exp[16];
    std::snprintf(exp, sizeof(exp), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    return sign + mantissa + exp;
  }
  std::string out;
  if (exponent < 0) {
    out = "0." + std::string(-exponent - 1, '0') + digits;
  } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
    out = digits + std::string(exponent + 1 - digits.size(), '0') + ".0";
  } else {
    out = digits.substr(0, exponent + 1) + "." + digits.substr(exponent + 1);
  }
  return sign + out;
}

namespace {

// Python's str.isprintable() for one code point.
bool is_printable(char32_t cp) {
  if (cp == ' ') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS: case UTF8PROC_CATEGORY_CO:
    case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL: case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
      return false;
    default:
      return true;
  }
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    const char32_t cp = utf8::decode(s, i, &len);
    char buf[16];
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp < 0x20 || cp == 0x7F) {
      std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      out += buf;
    } else if (cp < 0x80 || is_printable(cp)) {
      out.append(s, i, len);
    } else {
      if (cp < 0x100) std::snprintf(buf, sizeof(buf), "\\x%02x", static_cast<unsigned>(cp));
      else if (cp < 0x10000) std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
      else std::snprintf(buf, sizeof(buf), "\\U%08x", static_cast<unsigned>(cp));
      out += buf;
    }
    i += len;
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return python_float_repr(as_float());
  if (is_string()) return string_repr(as_string());
  if (is_list()) {
    const List& l = as_list();
    std::string out = l.is_tuple ? "(" : "[";
    for (size_t i = 0; i < l.items.size(); ++i) {
      if (i) out += ", ";
      out += l.items[i].repr();
    }
    if (l.is_tuple && l.items.size() == 1) out += ",";
    return out + (l.is_tuple ? ")" : "]");
  }
  if (is_dict()) {
    const Dict& d = as_dict();
    // A namespace may hold itself; as Python's repr, a dict met again inside itself prints {...}.
    thread_local std::vector<const Dict*> open;
    if (std::find(open.begin(), open.end(), &d) != open.end()) return d.is_namespace ? "<Namespace {...}>" : "{...}";
    open.push_back(&d);
    struct Close {
      ~Close() { open.pop_back(); }
    } close;
    std::string out = "{";
    for (size_t i = 0; i < d.items.size(); ++i) {
      if (i) out += ", ";
      out += string_repr(d.items[i].first) + ": " + d.items[i].second.repr();
    }
    out += "}";
    return d.is_namespace ? "<Namespace " + out + ">" : out;
  }
  return "<function " + as_callable().name + ">";
}

namespace {

// One byte of a JSON string as json.dumps writes it (non-ASCII bytes pass through).
void append_json_byte(std::string& out, unsigned char c) {
  switch (c) {
    case '"': out += "\\\""; break;
    case '\\': out += "\\\\"; break;
    case '\n': out += "\\n"; break;
    case '\r': out += "\\r"; break;
    case '\t': out += "\\t"; break;
    case '\b': out += "\\b"; break;
    case '\f': out += "\\f"; break;
    default:
      if (c < 0x20) {
        char buf[8];
        std::snprintf(buf, sizeof(buf), "\\u%04x", c);
        out += buf;
      } else {
        out += static_cast<char>(c);
      }
  }
}

}  // namespace

std::string python_json_string(std::string_view s, bool ensure_ascii) {
  std::string out = "\"";
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80 || !ensure_ascii) {
      append_json_byte(out, c);
      ++i;
      continue;
    }
    size_t len;
    const char32_t cp = utf8::decode(s, i, &len);
    char buf[16];
    if (cp < 0x10000) {
      std::snprintf(buf, sizeof(buf), "\\u%04x", static_cast<unsigned>(cp));
    } else {
      const char32_t v = cp - 0x10000;
      std::snprintf(buf, sizeof(buf), "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                    static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
    }
    out += buf;
    i += len;
  }
  return out + "\"";
}

namespace {

void dump(const Value& v, const JsonStyle& style, int level, std::string& out) {
  auto newline = [&](int lvl) {
    out += "\n";
    for (int i = 0; i < lvl; ++i) out += style.indent;
  };
  if (v.is_none()) { out += "null"; return; }
  if (v.is_bool()) { out += v.as_bool() ? "true" : "false"; return; }
  if (v.is_int()) { out += std::to_string(v.as_int()); return; }
  if (v.is_float()) {
    const double f = v.as_float();
    if (std::isnan(f)) out += "NaN";
    else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
    else out += python_float_repr(f);
    return;
  }
  if (v.is_string()) { out += python_json_string(v.as_string(), style.ensure_ascii); return; }
  if (v.is_list()) {
    const auto& items = v.as_list().items;
    if (items.empty()) { out += "[]"; return; }
    out += "[";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += style.item_separator;
      if (style.pretty) newline(level + 1);
      dump(items[i], style, level + 1, out);
    }
    if (style.pretty) newline(level);
    out += "]";
    return;
  }
  if (v.is_dict() && !v.as_dict().is_namespace) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.as_dict().items) items.push_back(&kv);
    if (items.empty()) { out += "{}"; return; }
    if (style.sort_keys) {
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    }
    out += "{";
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += style.item_separator;
      if (style.pretty) newline(level + 1);
      out += python_json_string(items[i]->first, style.ensure_ascii);
      out += style.key_separator;
      dump(items[i]->second, style, level + 1, out);
    }
    if (style.pretty) newline(level);
    out += "}";
    return;
  }
  throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable");
}

}  // namespace

std::string python_json_dumps(const Value& v, const JsonStyle& style) {
  std::string out;
  dump(v, style, 0, out);
  return out;
}

}  // namespace kiln::jinja
