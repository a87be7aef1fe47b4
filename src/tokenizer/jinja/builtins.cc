// Filters, tests, globals, methods and operators with the semantics of Jinja2 3.1 running on
// Python 3 in HF's ImmutableSandboxedEnvironment (tojson replaced by HF's json.dumps wrapper).
#include "tokenizer/jinja/builtins.h"

#include <algorithm>
#include <climits>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <set>
#include <unordered_map>

#include <utf8proc.h>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/template_error.h"
#include "tokenizer/utf8.h"

namespace kiln::jinja {
namespace {

// ---- arguments ----------------------------------------------------------------------------

struct Param {
  const char* name;
  std::optional<Value> fallback;  // nullopt: required
};

// Binds positional and keyword arguments to `params` like a Python signature.
std::vector<Value> bind(const std::string& what, CallArgs& args, std::initializer_list<Param> params) {
  std::vector<Param> ps(params);
  std::vector<std::optional<Value>> out(ps.size());
  if (args.positional.size() > ps.size()) {
    throw TemplateError(what + " takes at most " + std::to_string(ps.size()) + " argument(s), got " +
                        std::to_string(args.positional.size()));
  }
  for (size_t i = 0; i < args.positional.size(); ++i) out[i] = args.positional[i];
  for (auto& [name, value] : args.keywords) {
    size_t i = 0;
    while (i < ps.size() && name != ps[i].name) ++i;
    if (i == ps.size()) throw TemplateError(what + " got an unexpected keyword argument '" + name + "'");
    if (out[i]) throw TemplateError(what + " got multiple values for argument '" + name + "'");
    out[i] = value;
  }
  std::vector<Value> values;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (!out[i] && !ps[i].fallback) throw TemplateError(what + " is missing the argument '" + std::string(ps[i].name) + "'");
    values.push_back(out[i] ? *out[i] : *ps[i].fallback);
  }
  return values;
}

[[noreturn]] void type_error(const std::string& message) { throw TemplateError(message); }

int64_t to_int(const Value& v, const std::string& what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool() ? 1 : 0;
  type_error(what + " must be an integer, not '" + v.type_name() + "'");
}

// `count` copies of `unit` bytes, refused past kMaxBuiltBytes; negative counts are none.
size_t built_count(int64_t count, size_t unit, const std::string& what) {
  if (count <= 0) return 0;
  if (unit > 0 && static_cast<uint64_t>(count) > kMaxBuiltBytes / unit)
    throw TemplateError(what + " would be larger than " + std::to_string(kMaxBuiltBytes >> 20) + " MiB");
  return static_cast<size_t>(count);
}

// A float truncated to an integer, as Python's int() (which has no upper bound; int64 has).
int64_t float_to_int(double f) {
  if (!(f > -9223372036854775808.0 && f < 9223372036854775808.0))
    throw TemplateError("cannot convert float " + python_float_repr(f) + " to a 64-bit integer");
  return static_cast<int64_t>(f);
}

// ---- strings as Python sees them (sequences of code points) ----------------------------------

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> cps;
  size_t i = 0;
  while (i < s.size()) {
    size_t len;
    cps.push_back(utf8::decode(s, i, &len));
    i += len;
  }
  return cps;
}

std::string from_code_points(const std::vector<char32_t>& cps, size_t begin, size_t end) {
  std::string out;
  for (size_t i = begin; i < end; ++i) utf8::append(out, cps[i]);
  return out;
}

std::string map_case(const std::string& s, bool upper) {
  std::string out;
  for (char32_t cp : code_points(s)) {
    if (upper && cp == 0xDF) {  // Python's full mapping: 'ß'.upper() == 'SS'
      out += "SS";
      continue;
    }
    const auto m = upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)) : utf8proc_tolower(static_cast<utf8proc_int32_t>(cp));
    utf8::append(out, static_cast<char32_t>(m));
  }
  return out;
}

bool is_cased_upper(char32_t cp) { return utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)) != static_cast<utf8proc_int32_t>(cp); }
bool is_cased_lower(char32_t cp) { return utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)) != static_cast<utf8proc_int32_t>(cp); }

// Python's str.strip / lstrip / rstrip; `chars` None strips whitespace.
std::string strip(const std::string& s, const Value& chars, bool left, bool right) {
  const auto cps = code_points(s);
  std::vector<char32_t> set;
  const bool whitespace = chars.is_none() || chars.is_undefined();
  if (!whitespace) {
    if (!chars.is_string()) type_error("strip arg must be None or str");
    set = code_points(chars.as_string());
  }
  auto strip_it = [&](char32_t cp) {
    return whitespace ? utf8::is_python_space(cp) : std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left) while (b < e && strip_it(cps[b])) ++b;
  if (right) while (e > b && strip_it(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

std::vector<Value> split(const std::string& s, const Value& sep, int64_t maxsplit, bool from_right) {
  std::vector<std::string> parts;
  if (sep.is_none() || sep.is_undefined()) {
    const auto cps = code_points(s);
    std::vector<std::pair<size_t, size_t>> words;
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && utf8::is_python_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      size_t j = i;
      while (j < cps.size() && !utf8::is_python_space(cps[j])) ++j;
      words.emplace_back(i, j);
      i = j;
    }
    if (maxsplit < 0 || static_cast<size_t>(maxsplit) >= words.size()) {
      for (auto [b, e] : words) parts.push_back(from_code_points(cps, b, e));
    } else if (!from_right) {
      for (int64_t k = 0; k < maxsplit; ++k) parts.push_back(from_code_points(cps, words[k].first, words[k].second));
      // The rest keeps its inner whitespace but loses the leading run.
      parts.push_back(strip(from_code_points(cps, words[maxsplit].first, cps.size()), Value(None{}), false, true));
    } else {
      const size_t keep = words.size() - static_cast<size_t>(maxsplit);
      parts.push_back(strip(from_code_points(cps, 0, words[keep - 1].second), Value(None{}), true, false));
      for (size_t k = keep; k < words.size(); ++k) parts.push_back(from_code_points(cps, words[k].first, words[k].second));
    }
  } else {
    if (!sep.is_string()) type_error("must be str or None, not " + sep.type_name());
    const std::string& d = sep.as_string();
    if (d.empty()) throw TemplateError("empty separator");
    if (!from_right) {
      size_t pos = 0;
      int64_t n = 0;
      while (maxsplit < 0 || n < maxsplit) {
        const size_t hit = s.find(d, pos);
        if (hit == std::string::npos) break;
        parts.push_back(s.substr(pos, hit - pos));
        pos = hit + d.size();
        ++n;
      }
      parts.push_back(s.substr(pos));
    } else {
      size_t end = s.size();
      int64_t n = 0;
      std::vector<std::string> rev;
      while (maxsplit < 0 || n < maxsplit) {
        if (end < d.size()) break;
        const size_t hit = s.rfind(d, end - d.size());
        if (hit == std::string::npos) break;
        rev.push_back(s.substr(hit + d.size(), end - hit - d.size()));
        end = hit;
        ++n;
      }
      rev.push_back(s.substr(0, end));
      parts.assign(rev.rbegin(), rev.rend());
    }
  }
  std::vector<Value> out;
  for (auto& p : parts) out.emplace_back(std::move(p));
  return out;
}

std::vector<Value> splitlines(const std::string& s, bool keepends) {
  const auto cps = code_points(s);
  std::vector<Value> out;
  size_t start = 0, i = 0;
  while (i < cps.size()) {
    const char32_t c = cps[i];
    const bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E ||
                     c == 0x85 || c == 0x2028 || c == 0x2029;
    if (!brk) {
      ++i;
      continue;
    }
    size_t end = i + 1;
    if (c == '\r' && end < cps.size() && cps[end] == '\n') ++end;
    out.emplace_back(from_code_points(cps, start, keepends ? end : i));
    start = i = end;
  }
  if (start < cps.size()) out.emplace_back(from_code_points(cps, start, cps.size()));
  return out;
}

// Python's str.title(): upper-case the first cased letter after an uncased one.
std::string python_title(const std::string& s) {
  std::string out;
  bool previous_cased = false;
  for (char32_t cp : code_points(s)) {
    const bool cased = is_cased_upper(cp) || is_cased_lower(cp);
    const auto m = previous_cased ? utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))
                                  : utf8proc_totitle(static_cast<utf8proc_int32_t>(cp));
    utf8::append(out, static_cast<char32_t>(m));
    previous_cased = cased;
  }
  return out;
}

std::string python_capitalize(const std::string& s) {
  const auto cps = code_points(s);
  std::string out;
  for (size_t i = 0; i < cps.size(); ++i) {
    const auto cp = static_cast<utf8proc_int32_t>(cps[i]);
    utf8::append(out, static_cast<char32_t>(i == 0 ? utf8proc_totitle(cp) : utf8proc_tolower(cp)));
  }
  return out;
}

int64_t python_len(const Value& v) {
  if (v.is_undefined()) return 0;
  if (v.is_string()) return static_cast<int64_t>(utf8::length(v.as_string()));
  if (v.is_list()) return static_cast<int64_t>(v.as_list().items.size());
  if (v.is_dict() && !v.as_dict().is_namespace) return static_cast<int64_t>(v.as_dict().items.size());
  type_error("object of type '" + v.type_name() + "' has no len()");
}

// Python's < for the types templates compare.
bool less_than(const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) return to_int(a, "") < to_int(b, "");
    return a.as_double() < b.as_double();
  }
  if (a.is_string() && b.is_string()) return a.as_string() < b.as_string();  // UTF-8 order is code point order
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!x[i].equals(y[i])) return less_than(x[i], y[i]);
    }
    return x.size() < y.size();
  }
  type_error("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

Value attribute_or_item(const Value& v, const Value& attribute) {
  // Jinja2's make_attrgetter: "a.b" and integer parts walk into nested items.
  if (attribute.is_int()) return get_item(v, attribute);
  if (!attribute.is_string()) type_error("attribute must be a string or integer");
  Value cur = v;
  for (const Value& part : split(attribute.as_string(), Value("."), -1, false)) {
    const std::string& p = part.as_string();
    const bool numeric = !p.empty() && std::all_of(p.begin(), p.end(), [](char c) { return c >= '0' && c <= '9'; });
    int64_t index = 0;
    const bool fits = numeric && std::from_chars(p.data(), p.data() + p.size(), index).ec == std::errc();
    if (numeric && !fits) throw TemplateError("attribute index " + p + " out of range");
    cur = get_item(cur, numeric ? Value(index) : part);
  }
  return cur;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

Value list_of(std::vector<Value> items) { return Value::list(std::move(items)); }

// ---- methods ----------------------------------------------------------------------------

Value method(const std::string& name, std::function<Value(CallArgs&)> fn) {
  return Value::callable(name, [fn = std::move(fn)](Interpreter&, CallArgs& args) { return fn(args); });
}

bool prefix_test(const std::string& s, const Value& arg, bool suffix, const std::string& what) {
  auto check = [&](const Value& p) {
    if (!p.is_string()) type_error(what + " first arg must be str or a tuple of str, not " + p.type_name());
    const std::string& x = p.as_string();
    return suffix ? s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0 : s.rfind(x, 0) == 0;
  };
  if (arg.is_list() && arg.as_list().is_tuple) {
    for (const Value& p : arg.as_list().items) {
      if (check(p)) return true;
    }
    return false;
  }
  return check(arg);
}

// Every method Python's str, dict and list have; the ones not implemented here fail by name.
const std::set<std::string> kStrMethods = {
    "capitalize", "casefold", "center", "count", "encode", "endswith", "expandtabs", "find", "format", "format_map",
    "index", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier", "islower", "isnumeric",
    "isprintable", "isspace", "istitle", "isupper", "join", "ljust", "lower", "lstrip", "maketrans", "partition",
    "removeprefix", "removesuffix", "replace", "rfind", "rindex", "rjust", "rpartition", "rsplit", "rstrip", "split",
    "splitlines", "startswith", "strip", "swapcase", "title", "translate", "upper", "zfill"};
const std::set<std::string> kDictMethods = {"clear", "copy", "fromkeys", "get", "items", "keys", "pop", "popitem",
                                            "setdefault", "update", "values"};
const std::set<std::string> kListMethods = {"append", "clear", "copy", "count", "extend", "index", "insert", "pop",
                                            "remove", "reverse", "sort"};
const std::set<std::string> kMutating = {"append", "clear", "extend", "insert", "pop", "popitem", "remove",
                                         "reverse", "setdefault", "sort", "update"};

Value string_method(const std::string& s, const std::string& name) {
  const std::string what = "str." + name + "()";
  if (name == "startswith" || name == "endswith") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"prefix", std::nullopt}});
      return Value(prefix_test(s, v[0], name == "endswith", name));
    });
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"chars", Value(None{})}});
      return Value(strip(s, v[0], name != "rstrip", name != "lstrip"));
    });
  }
  if (name == "split" || name == "rsplit") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"sep", Value(None{})}, {"maxsplit", Value(-1)}});
      return list_of(split(s, v[0], to_int(v[1], "maxsplit"), name == "rsplit"));
    });
  }
  if (name == "splitlines") {
    return method(what, [s, what](CallArgs& a) {
      auto v = bind(what, a, {{"keepends", Value(false)}});
      return list_of(splitlines(s, v[0].truthy()));
    });
  }
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
    return method(what, [s, name, what](CallArgs& a) {
      bind(what, a, {});
      if (name == "title") return Value(python_title(s));
      if (name == "capitalize") return Value(python_capitalize(s));
      return Value(map_case(s, name == "upper"));
    });
  }
  if (name == "replace") {
    return method(what, [s, what](CallArgs& a) {
      auto v = bind(what, a, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value(-1)}});
      if (!v[0].is_string() || !v[1].is_string()) type_error("replace() arguments must be str");
      const std::string& from = v[0].as_string();
      const std::string& to = v[1].as_string();
      int64_t count = to_int(v[2], "count");
      std::string out;
      if (from.empty()) {
        // Python inserts `to` between every code point (and at both ends), up to count times.
        const auto cps = code_points(s);
        for (size_t i = 0; i <= cps.size(); ++i) {
          if (count < 0 || static_cast<int64_t>(i) < count) out += to;
          if (i < cps.size()) utf8::append(out, cps[i]);
        }
        return Value(out);
      }
      size_t pos = 0;
      while (count != 0) {
        const size_t hit = s.find(from, pos);
        if (hit == std::string::npos) break;
        out.append(s, pos, hit - pos);
        out += to;
        pos = hit + from.size();
        if (count > 0) --count;
      }
      out.append(s, pos, std::string::npos);
      return Value(out);
    });
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"sub", std::nullopt}});
      if (!v[0].is_string()) type_error("must be str, not " + v[0].type_name());
      const std::string& sub = v[0].as_string();
      if (name == "count") {
        if (sub.empty()) return Value(static_cast<int64_t>(utf8::length(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
        return Value(n);
      }
      const size_t hit = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
      if (hit == std::string::npos) {
        if (name == "index" || name == "rindex") throw TemplateError("substring not found");
        return Value(-1);
      }
      return Value(static_cast<int64_t>(utf8::length(std::string_view(s).substr(0, hit))));
    });
  }
  if (name == "join") {
    return method(what, [s, what](CallArgs& a) {
      auto v = bind(what, a, {{"iterable", std::nullopt}});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v[0])) {
        if (!item.is_string()) type_error("sequence item: expected str instance, " + item.type_name() + " found");
        if (!first) out += s;
        out += item.as_string();
        first = false;
      }
      return Value(out);
    });
  }
  if (name == "partition" || name == "rpartition") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"sep", std::nullopt}});
      if (!v[0].is_string() || v[0].as_string().empty()) type_error("partition() needs a non-empty str separator");
      const std::string& d = v[0].as_string();
      const size_t hit = name == "partition" ? s.find(d) : s.rfind(d);
      if (hit == std::string::npos) {
        return name == "partition" ? Value::list({Value(s), Value(""), Value("")}, true)
                                   : Value::list({Value(""), Value(""), Value(s)}, true);
      }
      return Value::list({Value(s.substr(0, hit)), Value(d), Value(s.substr(hit + d.size()))}, true);
    });
  }
  if (name == "removeprefix" || name == "removesuffix") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"affix", std::nullopt}});
      if (!v[0].is_string()) type_error(name + "() argument must be str");
      const std::string& x = v[0].as_string();
      if (name == "removeprefix") return Value(s.rfind(x, 0) == 0 ? s.substr(x.size()) : s);
      const bool ends = s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
      return Value(ends ? s.substr(0, s.size() - x.size()) : s);
    });
  }
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric" || name == "isalpha" || name == "isalnum" ||
      name == "isspace" || name == "isupper" || name == "islower") {
    return method(what, [s, name, what](CallArgs& a) {
      bind(what, a, {});
      const auto cps = code_points(s);
      if (cps.empty()) return Value(false);
      if (name == "isupper" || name == "islower") {
        bool cased = false;
        for (char32_t cp : cps) {
          if (name == "isupper" ? is_cased_lower(cp) : is_cased_upper(cp)) return Value(false);
          cased = cased || is_cased_lower(cp) || is_cased_upper(cp);
        }
        return Value(cased);
      }
      for (char32_t cp : cps) {
        const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
        const bool letter = cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
        const bool digit = cat == UTF8PROC_CATEGORY_ND;
        bool ok = false;
        if (name == "isspace") ok = utf8::is_python_space(cp);
        else if (name == "isalpha") ok = letter;
        else if (name == "isalnum") ok = letter || digit;
        else ok = digit;
        if (!ok) return Value(false);
      }
      return Value(true);
    });
  }
  if (name == "zfill" || name == "ljust" || name == "rjust" || name == "center") {
    return method(what, [s, name, what](CallArgs& a) {
      auto v = name == "zfill" ? bind(what, a, {{"width", std::nullopt}})
                               : bind(what, a, {{"width", std::nullopt}, {"fillchar", Value(" ")}});
      const int64_t width = to_int(v[0], "width");
      const int64_t len = static_cast<int64_t>(utf8::length(s));
      if (width <= len) return Value(s);
      std::string fill = name != "zfill" && v[1].is_string() ? v[1].as_string() : " ";
      const size_t pad = built_count(width - len, fill.size(), name + "() padding");
      if (name == "zfill") {
        const bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
        return Value((sign ? s.substr(0, 1) : "") + std::string(pad, '0') + (sign ? s.substr(1) : s));
      }
      auto repeat = [&](size_t n) {
        std::string out;
        for (size_t i = 0; i < n; ++i) out += fill;
        return out;
      };
      if (name == "ljust") return Value(s + repeat(pad));
      if (name == "rjust") return Value(repeat(pad) + s);
      const size_t left = pad / 2 + (pad & static_cast<size_t>(width) & 1);
      return Value(repeat(left) + s + repeat(pad - left));
    });
  }
  throw TemplateError("the str method '" + name + "' is not supported");
}

Value dict_method(const Value& obj, const std::string& name) {
  const std::string what = "dict." + name + "()";
  if (name == "get") {
    return method(what, [obj, what](CallArgs& a) {
      auto v = bind(what, a, {{"key", std::nullopt}, {"default", Value(None{})}});
      if (v[0].is_string()) {
        if (const Value* found = obj.as_dict().find(v[0].as_string())) return *found;
      }
      return v[1];
    });
  }
  if (name == "items" || name == "keys" || name == "values") {
    return method(what, [obj, name, what](CallArgs& a) {
      bind(what, a, {});
      std::vector<Value> out;
      for (const auto& [k, v] : obj.as_dict().items) {
        if (name == "items") out.push_back(Value::list({Value(k), v}, true));
        else if (name == "keys") out.emplace_back(k);
        else out.push_back(v);
      }
      return list_of(std::move(out));
    });
  }
  throw TemplateError("the dict method '" + name + "' is not supported");
}

Value list_method(const Value& obj, const std::string& name) {
  const std::string what = "list." + name + "()";
  if (name == "count" || name == "index") {
    return method(what, [obj, name, what](CallArgs& a) {
      auto v = bind(what, a, {{"value", std::nullopt}});
      const auto& items = obj.as_list().items;
      int64_t n = 0;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!items[i].equals(v[0])) continue;
        if (name == "index") return Value(static_cast<int64_t>(i));
        ++n;
      }
      if (name == "index") throw TemplateError(v[0].repr() + " is not in list");
      return Value(n);
    });
  }
  throw TemplateError("the list method '" + name + "' is not supported");
}

// ---- filters ----------------------------------------------------------------------------

std::string soft_str(const Value& v) { return v.str(); }

Value do_tojson(const Value& v, CallArgs& args) {
  auto p = bind("tojson", args, {{"ensure_ascii", Value(false)}, {"indent", Value(None{})},
                                 {"separators", Value(None{})}, {"sort_keys", Value(false)}});
  JsonStyle style;
  style.ensure_ascii = p[0].truthy();
  if (!p[1].is_none()) {
    style.pretty = true;
    style.item_separator = ",";
    if (p[1].is_string()) style.indent = p[1].as_string();
    else style.indent = std::string(built_count(to_int(p[1], "indent"), 1, "tojson indent"), ' ');
  }
  if (!p[2].is_none()) {
    if (!p[2].is_list() || p[2].as_list().items.size() != 2 || !p[2].as_list().items[0].is_string() ||
        !p[2].as_list().items[1].is_string()) {
      type_error("tojson separators must be a pair of strings");
    }
    style.item_separator = p[2].as_list().items[0].as_string();
    style.key_separator = p[2].as_list().items[1].as_string();
  }
  style.sort_keys = p[3].truthy();
  return Value(python_json_dumps(v, style));
}

std::vector<Value> sorted(std::vector<Value> items, bool reverse, bool case_sensitive, const Value& attribute) {
  auto key = [&](const Value& v) {
    Value k = attribute.is_none() ? v : attribute_or_item(v, attribute);
    if (!case_sensitive && k.is_string()) return Value(map_case(k.as_string(), false));
    return k;
  };
  std::vector<std::pair<Value, Value>> keyed;
  for (auto& v : items) keyed.emplace_back(key(v), v);
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& a, const auto& b) {
    return reverse ? less_than(b.first, a.first) : less_than(a.first, b.first);
  });
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return out;
}

// select / reject / selectattr / rejectattr.
Value select_items(Interpreter& in, const Value& seq, CallArgs& args, bool by_attribute, bool keep_matching) {
  std::vector<Value> rest = args.positional;
  if (!args.keywords.empty()) throw TemplateError("keyword arguments to select filters are not supported");
  Value attribute;
  if (by_attribute) {
    if (rest.empty()) throw TemplateError("selectattr needs an attribute name");
    attribute = rest.front();
    rest.erase(rest.begin());
  }
  std::string test;
  if (!rest.empty()) {
    if (!rest.front().is_string()) type_error("the test name must be a string");
    test = rest.front().as_string();
    rest.erase(rest.begin());
  }
  std::vector<Value> out;
  for (const Value& item : iterate(seq)) {
    const Value subject = by_attribute ? attribute_or_item(item, attribute) : item;
    bool ok;
    if (test.empty()) {
      ok = subject.truthy();
    } else {
      CallArgs test_args;
      test_args.positional = rest;
      ok = in.call_test(test, subject, test_args);
    }
    if (ok == keep_matching) out.push_back(item);
  }
  return list_of(std::move(out));
}

}  // namespace

void require_defined(const Value& v) {
  if (v.is_undefined()) throw TemplateError(v.undefined_name());
}

std::vector<Value> iterate(const Value& v) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list().items;
  if (v.is_dict() && !v.as_dict().is_namespace) {
    std::vector<Value> keys;
    for (const auto& kv : v.as_dict().items) keys.emplace_back(kv.first);
    return keys;
  }
  if (v.is_string()) {
    std::vector<Value> chars;
    for (char32_t cp : code_points(v.as_string())) {
      std::string c;
      utf8::append(c, cp);
      chars.emplace_back(std::move(c));
    }
    return chars;
  }
  type_error("'" + v.type_name() + "' object is not iterable");
}

Value get_attribute(const Value& obj, const std::string& name) {
  require_defined(obj);
  if (!name.empty() && name[0] == '_') {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
  }
  auto unsafe = [&] {
    return Value::undefined("access to attribute '" + name + "' of '" + obj.type_name() + "' object is unsafe.");
  };
  if (obj.is_string()) {
    if (kStrMethods.count(name)) return string_method(obj.as_string(), name);
  } else if (obj.is_dict() && !obj.as_dict().is_namespace) {
    if (kDictMethods.count(name)) return kMutating.count(name) ? unsafe() : dict_method(obj, name);
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(name)) return *v;
  } else if (obj.is_list()) {
    const bool tuple = obj.as_list().is_tuple;
    if (kListMethods.count(name) && (!tuple || name == "count" || name == "index")) {
      return kMutating.count(name) ? unsafe() : list_method(obj, name);
    }
  }
  return Value::undefined("'" + obj.type_name() + " object' has no attribute '" + name + "'");
}

Value get_item(const Value& obj, const Value& key) {
  require_defined(obj);
  if (obj.is_list() || obj.is_string()) {
    if (key.is_int() || key.is_bool()) {
      const int64_t n = python_len(obj);
      int64_t i = to_int(key, "index");
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
      if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
      const auto cps = code_points(obj.as_string());
      return Value(from_code_points(cps, static_cast<size_t>(i), static_cast<size_t>(i) + 1));
    }
  } else if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
    }
  }
  if (key.is_string()) return get_attribute(obj, key.as_string());
  return Value::undefined("'" + obj.type_name() + " object' has no element " + key.repr());
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  require_defined(obj);
  if (!obj.is_list() && !obj.is_string()) type_error("'" + obj.type_name() + "' object is not subscriptable");
  const int64_t n = python_len(obj);
  const int64_t st = step.is_none() ? 1 : to_int(step, "slice step");
  if (st == 0) throw TemplateError("slice step cannot be zero");
  // Python's slice.indices(): negative bounds count from the end, then clamp to the sequence.
  auto clamp = [&](const Value& v, int64_t fallback) {
    if (v.is_none()) return fallback;
    int64_t i = to_int(v, "slice index");
    if (i < 0) i += n;
    return st > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
  };
  const int64_t b = clamp(start, st > 0 ? 0 : n - 1);
  const int64_t e = clamp(stop, st > 0 ? n : -1);
  std::vector<int64_t> idx;
  for (int64_t i = b; st > 0 ? i < e : i > e; i += st) idx.push_back(i);
  if (obj.is_list()) {
    std::vector<Value> out;
    for (int64_t i : idx) out.push_back(obj.as_list().items[static_cast<size_t>(i)]);
    return Value::list(std::move(out), obj.as_list().is_tuple);
  }
  const auto cps = code_points(obj.as_string());
  std::string out;
  for (int64_t i : idx) utf8::append(out, cps[static_cast<size_t>(i)]);
  return Value(out);
}

Value unary_op(const std::string& op, const Value& a) {
  require_defined(a);
  if (a.is_int() || a.is_bool()) {
    int64_t r = to_int(a, "");
    if (op == "-" && __builtin_sub_overflow(int64_t{0}, r, &r)) throw TemplateError("integer overflow");
    return Value(r);
  }
  if (a.is_float()) return Value(op == "-" ? -a.as_float() : a.as_float());
  type_error("bad operand type for unary " + op + ": '" + a.type_name() + "'");
}

Value binary_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") return Value(a.str() + b.str());
  require_defined(a);
  require_defined(b);
  const bool ints = (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
  const bool nums = a.is_number() && b.is_number();
  auto unsupported_operands = [&]() -> Value {
    type_error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
  };
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(to_int(a, ""), to_int(b, ""), &r)) throw TemplateError("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_double() + b.as_double());
    if (a.is_string() && b.is_string()) return Value(a.as_string() + b.as_string());
    if (a.is_string()) type_error("can only concatenate str (not \"" + b.type_name() + "\") to str");
    if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      return Value::list(std::move(items), a.as_list().is_tuple);
    }
    if (a.is_list()) type_error("can only concatenate " + a.type_name() + " (not \"" + b.type_name() + "\") to " + a.type_name());
    return unsupported_operands();
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(to_int(a, ""), to_int(b, ""), &r)) throw TemplateError("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_double() - b.as_double());
    return unsupported_operands();
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(to_int(a, ""), to_int(b, ""), &r)) throw TemplateError("integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.as_double() * b.as_double());
    const Value* seq = a.is_string() || a.is_list() ? &a : (b.is_string() || b.is_list() ? &b : nullptr);
    const Value* count = seq == &a ? &b : &a;
    if (seq && (count->is_int() || count->is_bool())) {
      const size_t unit = seq->is_string() ? seq->as_string().size() : seq->as_list().items.size() * sizeof(Value);
      const size_t n = built_count(to_int(*count, ""), unit, "a repeated " + seq->type_name());
      if (seq->is_string()) {
        std::string out;
        for (size_t i = 0; i < n; ++i) out += seq->as_string();
        return Value(out);
      }
      std::vector<Value> items;
      for (size_t i = 0; i < n; ++i) items.insert(items.end(), seq->as_list().items.begin(), seq->as_list().items.end());
      return Value::list(std::move(items), seq->as_list().is_tuple);
    }
    return unsupported_operands();
  }
  if (op == "/" || op == "//" || op == "%") {
    if (!nums) {
      if (op == "%" && a.is_string()) throw TemplateError("printf-style string formatting ('%') is not supported");
      return unsupported_operands();
    }
    if (b.as_double() == 0.0) throw TemplateError(op == "%" ? "integer modulo by zero" : "division by zero");
    if (op == "/") return Value(a.as_double() / b.as_double());
    if (ints) {
      const int64_t x = to_int(a, ""), y = to_int(b, "");
      if (x == INT64_MIN && y == -1) throw TemplateError("integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        --q;
        r += y;
      }
      return Value(op == "//" ? q : r);
    }
    const double x = a.as_double(), y = b.as_double();
    const double q = std::floor(x / y);
    return Value(op == "//" ? q : x - q * y);
  }
  if (op == "**") {
    if (ints && to_int(b, "") >= 0) {
      // By squaring: 1 ** (2^63 - 1) takes 63 steps, not 2^63.
      int64_t r = 1, base = to_int(a, "");
      for (uint64_t e = static_cast<uint64_t>(to_int(b, "")); e != 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r)) throw TemplateError("integer overflow");
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) throw TemplateError("integer overflow");
      }
      return Value(r);
    }
    if (nums) return Value(std::pow(a.as_double(), b.as_double()));
    return unsupported_operands();
  }
  throw TemplateError("unknown operator '" + op + "'");
}

bool compare_op(const std::string& op, const Value& a, const Value& b) {
  if (op == "==") return a.equals(b);
  if (op == "!=") return !a.equals(b);
  if (op == "<") return less_than(a, b);
  if (op == ">") return less_than(b, a);
  if (op == "<=") return less_than(a, b) || a.equals(b);
  if (op == ">=") return less_than(b, a) || a.equals(b);
  const bool negate = op == "not in";
  if (b.is_undefined()) return negate;
  bool found = false;
  if (b.is_string()) {
    if (!a.is_string()) type_error("'in <string>' requires string as left operand, not " + a.type_name());
    found = b.as_string().find(a.as_string()) != std::string::npos;
  } else if (b.is_list()) {
    for (const Value& item : b.as_list().items) found = found || item.equals(a);
  } else if (b.is_dict() && !b.as_dict().is_namespace) {
    found = a.is_string() && b.as_dict().find(a.as_string()) != nullptr;
  } else {
    type_error("argument of type '" + b.type_name() + "' is not iterable");
  }
  return found != negate;
}

namespace {

// One filter: the operand, its call's arguments, the name it was called by (several names share a
// body) and "filter 'name'" for messages.
using Filter = Value (*)(Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args);

// Every filter this subset has, by name.
const std::unordered_map<std::string, Filter>& filters() {
  static const std::unordered_map<std::string, Filter> table = [] {
    std::unordered_map<std::string, Filter> t;
    auto add = [&t](std::initializer_list<const char*> names, Filter f) {
      for (const char* n : names) t.emplace(n, f);
    };
    add({"tojson"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
        return do_tojson(v, args);
        });
    add({"length", "count"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return Value(python_len(v));
        });
    add({"string"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return Value(soft_str(v));
        });
    add({"trim"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"chars", Value(None{})}});
      return Value(strip(soft_str(v), p[0], true, true));
        });
    add({"default", "d"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"default_value", Value("")}, {"boolean", Value(false)}});
      if (v.is_undefined() || (p[1].truthy() && !v.truthy())) return p[0];
      return v;
        });
    add({"upper", "lower"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return Value(map_case(soft_str(v), name == "upper"));
        });
    add({"capitalize"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return Value(python_capitalize(soft_str(v)));
        });
    add({"title"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      // Jinja2's do_title: capitalise each piece after runs of whitespace, '-', '(', '{', '[', '<'.
      bind(what, args, {});
      const auto cps = code_points(soft_str(v));
      std::string out;
      bool start = true;
      for (char32_t cp : cps) {
        const bool delimiter = utf8::is_python_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
        const auto c = static_cast<utf8proc_int32_t>(cp);
        utf8::append(out, static_cast<char32_t>(delimiter ? c : start ? utf8proc_toupper(c) : utf8proc_tolower(c)));
        start = delimiter;
      }
      return Value(out);
        });
    add({"replace"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"old", std::nullopt}, {"new", std::nullopt}, {"count", Value(None{})}});
      CallArgs inner;
      inner.positional = {p[0], p[1]};
      if (!p[2].is_none()) inner.positional.push_back(p[2]);
      return string_method(soft_str(v), "replace").as_callable().fn(in, inner);
        });
    add({"join"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"d", Value("")}, {"attribute", Value(None{})}});
      std::string out;
      bool first = true;
      for (const Value& item : iterate(v)) {
        if (!first) out += soft_str(p[0]);
        out += soft_str(p[1].is_none() ? item : attribute_or_item(item, p[1]));
        first = false;
      }
      return Value(out);
        });
    add({"first", "last"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      const auto items = iterate(v);
      if (items.empty()) return Value::undefined("No " + name + " item, sequence was empty.");
      return name == "first" ? items.front() : items.back();
        });
    add({"list"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return list_of(iterate(v));
        });
    add({"reverse"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      if (v.is_string()) {
        auto cps = code_points(v.as_string());
        std::reverse(cps.begin(), cps.end());
        return Value(from_code_points(cps, 0, cps.size()));
      }
      auto items = iterate(v);
      std::reverse(items.begin(), items.end());
      return list_of(std::move(items));
        });
    add({"sort"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"reverse", Value(false)}, {"case_sensitive", Value(false)}, {"attribute", Value(None{})}});
      return list_of(sorted(iterate(v), p[0].truthy(), p[1].truthy(), p[2]));
        });
    add({"unique"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"case_sensitive", Value(false)}, {"attribute", Value(None{})}});
      std::vector<Value> out, seen;
      for (const Value& item : iterate(v)) {
        Value key = p[1].is_none() ? item : attribute_or_item(item, p[1]);
        if (!p[0].truthy() && key.is_string()) key = Value(map_case(key.as_string(), false));
        if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return s.equals(key); })) {
          seen.push_back(key);
          out.push_back(item);
        }
      }
      return list_of(std::move(out));
        });
    add({"items"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      if (v.is_undefined()) return list_of({});
      if (!v.is_dict()) type_error("can only get item pairs from a mapping.");
      return dict_method(v, "items").as_callable().fn(in, args);
        });
    add({"dictsort"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"case_sensitive", Value(false)}, {"by", Value("key")}, {"reverse", Value(false)}});
      if (!v.is_dict()) type_error("dictsort needs a mapping");
      std::vector<Value> pairs;
      for (const auto& [k, val] : v.as_dict().items) pairs.push_back(Value::list({Value(k), val}, true));
      const bool by_value = p[1].is_string() && p[1].as_string() == "value";
      if (!by_value && !(p[1].is_string() && p[1].as_string() == "key")) throw TemplateError("You can only sort by either \"key\" or \"value\"");
      return list_of(sorted(pairs, p[2].truthy(), p[0].truthy(), Value(by_value ? 1 : 0)));
        });
    add({"map"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      std::vector<Value> out;
      Value attribute, fallback;
      bool by_attribute = false;
      for (auto& [k, val] : args.keywords) {
        if (k == "attribute") {
          attribute = val;
          by_attribute = true;
        } else if (k == "default") {
          fallback = val;
        } else {
          throw TemplateError("filter 'map' got an unexpected keyword argument '" + k + "'");
        }
      }
      if (by_attribute) {
        for (const Value& item : iterate(v)) {
          Value x = attribute_or_item(item, attribute);
          out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
        }
        return list_of(std::move(out));
      }
      if (args.positional.empty() || !args.positional[0].is_string()) throw TemplateError("map needs a filter name or attribute=");
      const std::string filter = args.positional[0].as_string();
      for (const Value& item : iterate(v)) {
        CallArgs inner;
        inner.positional.assign(args.positional.begin() + 1, args.positional.end());
        out.push_back(in.call_filter(filter, item, inner));
      }
      return list_of(std::move(out));
        });
    add({"select", "reject"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
        return select_items(in, v, args, false, name == "select");
        });
    add({"selectattr", "rejectattr"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
        return select_items(in, v, args, true, name == "selectattr");
        });
    add({"int"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"default", Value(0)}, {"base", Value(10)}});
      if (v.is_int() || v.is_bool()) return Value(to_int(v, ""));
      if (v.is_float()) return std::isfinite(v.as_float()) ? Value(float_to_int(v.as_float())) : p[0];
      if (v.is_string()) {
        const std::string s = strip(v.as_string(), Value(None{}), true, true);
        std::optional<double> d;  // a float spelling, converted outside the try: its range error is an error
        try {
          size_t used = 0;
          const long long i = std::stoll(s, &used, static_cast<int>(to_int(p[1], "base")));
          if (used == s.size()) return Value(static_cast<int64_t>(i));
          d = std::stod(s, &used);
          if (used != s.size()) d.reset();
        } catch (const std::exception&) {
        }
        if (d && std::isfinite(*d)) return Value(float_to_int(*d));
      }
      return p[0];
        });
    add({"float"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"default", Value(0.0)}});
      if (v.is_number()) return Value(v.as_double());
      if (v.is_string()) {
        try {
          size_t used = 0;
          const std::string s = strip(v.as_string(), Value(None{}), true, true);
          const double d = std::stod(s, &used);
          if (used == s.size()) return Value(d);
        } catch (const std::exception&) {
        }
      }
      return p[0];
        });
    add({"abs"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      if (v.is_int() || v.is_bool()) return Value(std::abs(to_int(v, "")));
      if (v.is_float()) return Value(std::fabs(v.as_float()));
      type_error("bad operand type for abs(): '" + v.type_name() + "'");
        });
    add({"round"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"precision", Value(0)}, {"method", Value("common")}});
      if (!v.is_number()) type_error("round needs a number");
      const int64_t precision = to_int(p[0], "precision");
      const std::string m = p[1].is_string() ? p[1].as_string() : "";
      const double x = v.as_double();
      if (m == "common") {
        // Python's round(): the double correctly rounded to `precision` decimals, ties to even,
        // which is what printf's %.Nf computes.
        if (precision < 0 || precision > 300) throw TemplateError("round precision outside 0..300 is not supported");
        char buf[400];
        std::snprintf(buf, sizeof(buf), "%.*f", static_cast<int>(precision), x);
        return Value(std::strtod(buf, nullptr));
      }
      const double scale = std::pow(10.0, static_cast<double>(precision));
      if (m == "ceil") return Value(std::ceil(x * scale) / scale);
      if (m == "floor") return Value(std::floor(x * scale) / scale);
      throw TemplateError("method must be common, ceil or floor");
        });
    add({"sum"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"attribute", Value(None{})}, {"start", Value(0)}});
      Value total = p[1];
      for (const Value& item : iterate(v)) total = binary_op("+", total, p[0].is_none() ? item : attribute_or_item(item, p[0]));
      return total;
        });
    add({"min", "max"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"case_sensitive", Value(false)}, {"attribute", Value(None{})}});
      auto items = sorted(iterate(v), false, p[0].truthy(), p[1]);
      if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
      return name == "min" ? items.front() : items.back();
        });
    add({"indent"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"width", Value(4)}, {"first", Value(false)}, {"blank", Value(false)}});
      const std::string pad =
          p[0].is_string() ? p[0].as_string() : std::string(built_count(to_int(p[0], "width"), 1, "indent width"), ' ');
      std::string s = soft_str(v);
      std::string out;
      std::string newline = "\n";
      if (s.empty()) return Value(p[1].truthy() && p[2].truthy() ? pad : "");
      // Jinja2 appends a newline, indents the lines after the first, then drops it again.
      s += newline;
      size_t pos = 0;
      bool first_line = true;
      while (pos < s.size()) {
        size_t nl = s.find('\n', pos);
        if (nl == std::string::npos) nl = s.size();
        const std::string line = s.substr(pos, nl - pos);
        const bool blank_line = strip(line, Value(None{}), true, true).empty();
        if (first_line) out += (p[1].truthy() ? pad : "") + line;
        else out += newline + ((p[2].truthy() || !blank_line) ? pad : "") + line;
        first_line = false;
        pos = nl + 1;
      }
      return Value(out);
        });
    add({"safe"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return v;
        });
    add({"escape", "e", "forceescape"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      bind(what, args, {});
      return Value(html_escape(soft_str(v)));
        });
    add({"attr"},
        [](Interpreter& in, const std::string& name, const std::string& what, Value& v, CallArgs& args) -> Value {
      auto p = bind(what, args, {{"name", std::nullopt}});
      if (!p[0].is_string()) type_error("attr needs a string name");
      return get_attribute(v, p[0].as_string());
        });
    return t;
  }();
  return table;
}

// Jinja2 filters this subset leaves out: named as such, not as unknown.
bool unsupported_filter(const std::string& name) {
  static const std::set<std::string> kNames = {"batch", "center", "filesizeformat", "format", "groupby", "pprint", "random", "slice", "striptags", "truncate", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};
  return kNames.count(name) > 0;
}

}  // namespace

Value apply_filter(Interpreter& in, const std::string& name, Value v, CallArgs& args) {
  if (auto it = filters().find(name); it != filters().end()) return it->second(in, name, "filter '" + name + "'", v, args);
  if (unsupported_filter(name)) throw TemplateError("the filter '" + name + "' is not supported");
  throw TemplateError("no filter named '" + name + "'");
}

namespace {

// One test: the value, its call's arguments, the name it was called by and "test 'name'".
using Test = bool (*)(Interpreter& in, const std::string& name, const std::string& what, const Value& v, CallArgs& args);

bool iterable(const Value& v) {
  return v.is_undefined() || v.is_list() || v.is_string() || (v.is_dict() && !v.as_dict().is_namespace);
}

// Every test this subset has, by name.
const std::unordered_map<std::string, Test>& tests() {
  static const std::unordered_map<std::string, Test> table = [] {
    std::unordered_map<std::string, Test> t;
    // Tests of the value alone: no arguments.
    using Predicate = bool (*)(const Value&);
    static const std::vector<std::pair<const char*, Predicate>> kPredicates = {
        {"defined", [](const Value& v) { return !v.is_undefined(); }},
        {"undefined", [](const Value& v) { return v.is_undefined(); }},
        {"none", [](const Value& v) { return v.is_none(); }},
        {"boolean", [](const Value& v) { return v.is_bool(); }},
        {"false", [](const Value& v) { return v.is_bool() && !v.as_bool(); }},
        {"true", [](const Value& v) { return v.is_bool() && v.as_bool(); }},
        {"integer", [](const Value& v) { return v.is_int(); }},
        {"float", [](const Value& v) { return v.is_float(); }},
        {"number", [](const Value& v) { return v.is_number(); }},
        {"string", [](const Value& v) { return v.is_string(); }},
        {"mapping", [](const Value& v) { return v.is_dict() && !v.as_dict().is_namespace; }},
        {"iterable", iterable},
        {"sequence", iterable},
        {"callable", [](const Value& v) { return v.is_callable(); }},
        {"escaped", [](const Value&) { return false; }},
    };
    static std::unordered_map<std::string, Predicate> predicates;
    for (const auto& [n, f] : kPredicates) {
      predicates.emplace(n, f);
      t.emplace(n, [](Interpreter&, const std::string& name, const std::string& what, const Value& v, CallArgs& args) {
        bind(what, args, {});
        return predicates.at(name)(v);
      });
    }
    t.emplace("lower", [](Interpreter& in, const std::string& name, const std::string& what, const Value& v, CallArgs& args) {
      bind(what, args, {});
      CallArgs none;
      return string_method(soft_str(v), name == "lower" ? "islower" : "isupper").as_callable().fn(in, none).truthy();
    });
    t.emplace("upper", t.at("lower"));
    t.emplace("odd", [](Interpreter&, const std::string& name, const std::string& what, const Value& v, CallArgs& args) {
      bind(what, args, {});
      const int64_t i = to_int(v, name);
      return (((i % 2) + 2) % 2 == 1) == (name == "odd");
    });
    t.emplace("even", t.at("odd"));
    t.emplace("divisibleby", [](Interpreter&, const std::string& name, const std::string& what, const Value& v, CallArgs& args) {
      auto p = bind(what, args, {{"num", std::nullopt}});
      const int64_t d = to_int(p[0], "divisibleby");
      if (d == 0) throw TemplateError("integer modulo by zero");
      return to_int(v, name) % d == 0;
    });
    // The comparisons, under each of their names: the operator compare_op takes.
    static const std::vector<std::pair<std::vector<std::string>, std::string>> kComparisons = {
        {{"eq", "equalto", "=="}, "=="}, {{"ne", "!="}, "!="}, {{"lt", "lessthan", "<"}, "<"},
        {{"le", "<="}, "<="},            {{"gt", "greaterthan", ">"}, ">"}, {{"ge", ">="}, ">="}};
    static std::unordered_map<std::string, std::string> operators;
    for (const auto& [names, op] : kComparisons)
      for (const std::string& n : names) {
        operators.emplace(n, op);
        t.emplace(n, [](Interpreter&, const std::string& name, const std::string& what, const Value& v, CallArgs& args) {
          auto p = bind(what, args, {{"other", std::nullopt}});
          return compare_op(operators.at(name), v, p[0]);
        });
      }
    t.emplace("in", [](Interpreter&, const std::string&, const std::string& what, const Value& v, CallArgs& args) {
      auto p = bind(what, args, {{"seq", std::nullopt}});
      return compare_op("in", v, p[0]);
    });
    t.emplace("sameas", [](Interpreter&, const std::string&, const std::string& what, const Value& v, CallArgs& args) {
      auto p = bind(what, args, {{"other", std::nullopt}});
      const Value& o = p[0];
      if (v.is_none() || o.is_none()) return v.is_none() && o.is_none();
      if (v.is_bool() || o.is_bool()) return v.is_bool() && o.is_bool() && v.as_bool() == o.as_bool();
      if (v.is_list() && o.is_list()) return &v.as_list() == &o.as_list();
      if (v.is_dict() && o.is_dict()) return &v.as_dict() == &o.as_dict();
      throw TemplateError("the test 'sameas' is only supported for none, booleans, lists and dicts");
    });
    return t;
  }();
  return table;
}

}  // namespace

bool apply_test(Interpreter& in, const std::string& name, const Value& v, CallArgs& args) {
  if (auto it = tests().find(name); it != tests().end()) return it->second(in, name, "test '" + name + "'", v, args);
  throw TemplateError("no test named '" + name + "'");
}

void add_globals(Frame& frame) {
  frame.set("range", Value::callable("range", [](Interpreter&, CallArgs& a) -> Value {
              if (!a.keywords.empty()) throw TemplateError("range() takes no keyword arguments");
              const auto& p = a.positional;
              if (p.empty() || p.size() > 3) throw TemplateError("range expected 1 to 3 arguments");
              int64_t start = 0, stop, step = 1;
              if (p.size() == 1) {
                stop = to_int(p[0], "range");
              } else {
                start = to_int(p[0], "range");
                stop = to_int(p[1], "range");
                if (p.size() == 3) step = to_int(p[2], "range");
              }
              if (step == 0) throw TemplateError("range() arg 3 must not be zero");
              std::vector<Value> out;
              for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                if (out.size() >= 100000) throw TemplateError("range too big, maximum size for range is 100000");
                out.emplace_back(i);
              }
              return list_of(std::move(out));
            }));
  frame.set("namespace", Value::callable("namespace", [](Interpreter& in, CallArgs& a) -> Value {
              Value ns = Value::dict();
              ns.as_dict().is_namespace = true;
              in.track_namespace(ns);
              if (a.positional.size() > 1) throw TemplateError("namespace() takes at most one positional argument");
              if (!a.positional.empty()) {
                if (!a.positional[0].is_dict()) type_error("namespace() positional argument must be a mapping");
                for (const auto& [k, v] : a.positional[0].as_dict().items) ns.as_dict().set(k, v);
              }
              for (const auto& [k, v] : a.keywords) ns.as_dict().set(k, v);
              return ns;
            }));
  frame.set("dict", Value::callable("dict", [](Interpreter&, CallArgs& a) -> Value {
              if (!a.positional.empty()) throw TemplateError("dict() with positional arguments is not supported");
              Value d = Value::dict();
              for (const auto& [k, v] : a.keywords) d.as_dict().set(k, v);
              return d;
            }));
  frame.set("raise_exception", Value::callable("raise_exception", [](Interpreter&, CallArgs& a) -> Value {
              auto p = bind("raise_exception", a, {{"message", std::nullopt}});
              throw TemplateError("raise_exception: " + p[0].str());
            }));
  frame.set("strftime_now", Value::callable("strftime_now", [](Interpreter&, CallArgs& a) -> Value {
              auto p = bind("strftime_now", a, {{"format", std::nullopt}});
              if (!p[0].is_string()) type_error("strftime_now() format must be a string");
              const std::time_t now = std::time(nullptr);
              std::tm local{};
              localtime_r(&now, &local);
              char buf[256];
              const size_t n = std::strftime(buf, sizeof(buf), p[0].as_string().c_str(), &local);
              return Value(std::string(buf, n));
            }));
}

}  // namespace kiln::jinja
