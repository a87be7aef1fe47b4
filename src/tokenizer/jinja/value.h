// The values a template computes with, modelled on the Python objects Jinja2 works with (HF
// renders chat templates with Python's Jinja2): None, bool, int, float, str, list, tuple, dict,
// namespace, callables and Undefined, with Python's truthiness, equality, ordering, str() and
// repr().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::jinja {

class Value;
struct CallArgs;
class Interpreter;

// Python's dict: insertion-ordered, string keys (all a chat template needs).
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // namespace(): the one object a sandboxed template may mutate
  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  void set(const std::string& key, Value value);
};

struct List {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct Callable {
  std::string name;
  std::function<Value(Interpreter&, CallArgs&)> fn;
};

struct Undefined {
  std::string name;  // what was looked up, for "'x' is undefined"
};
struct None {};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string, std::shared_ptr<List>,
                               std::shared_ptr<Dict>, std::shared_ptr<Callable>>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}                        // NOLINT
  Value(bool b) : v_(b) {}                           // NOLINT
  Value(int64_t i) : v_(i) {}                        // NOLINT
  Value(int i) : v_(static_cast<int64_t>(i)) {}      // NOLINT
  Value(double f) : v_(f) {}                         // NOLINT
  Value(std::string s) : v_(std::move(s)) {}         // NOLINT
  Value(const char* s) : v_(std::string(s)) {}       // NOLINT
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}          // NOLINT
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}          // NOLINT
  Value(std::shared_ptr<Callable> c) : v_(std::move(c)) {}      // NOLINT
  static Value undefined(std::string name) { Value v; v.v_ = Undefined{std::move(name)}; return v; }
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict();
  static Value callable(std::string name, std::function<Value(Interpreter&, CallArgs&)> fn);
  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Callable>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  int64_t as_int() const { return std::get<int64_t>(v_); }
  double as_float() const { return std::get<double>(v_); }
  // Numbers as double (bools count as 0/1, as in Python).
  double as_double() const;
  const std::string& as_string() const { return std::get<std::string>(v_); }
  const List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<Callable>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's type name ("str", "int", "NoneType", "Undefined", ...), for error messages.
  std::string type_name() const;
  bool truthy() const;
  // Python ==.
  bool equals(const Value& other) const;
  // Python str() (Undefined prints as "").
  std::string str() const;
  // Python repr().
  std::string repr() const;

 private:
  Storage v_;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
};

// Python's repr() of a float ("1.0", "1e+16", "0.0001", "inf").
std::string python_float_repr(double f);
// json.dumps(value, ensure_ascii=False, indent, separators, sort_keys) as HF's tojson filter
// calls it; throws TemplateError for values JSON cannot hold.
struct JsonStyle {
  bool pretty = false;  // indent is not None: one item per line
  std::string indent;   // the unit repeated per level when pretty
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // escape non-ASCII as \uXXXX (surrogate pairs above U+FFFF)
};
std::string python_json_dumps(const Value& v, const JsonStyle& style);
// json.dumps of one string.
std::string python_json_string(std::string_view s, bool ensure_ascii = false);

}  // namespace kiln::jinja
