// Jinja2's built-in filters, tests and global functions, Python's str/dict/list methods, and the
// operators' Python semantics, as far as chat templates use them. A name outside this subset is a
// TemplateError naming it, never a silent approximation.
#pragma once

#include <string>

#include "tokenizer/jinja/value.h"

namespace kiln::jinja {

class Interpreter;

// The largest string or list one operation may build (`s * n`, padding, indent widths): beyond it a
// TemplateError, not a multi-gigabyte allocation from a few bytes of template.
inline constexpr size_t kMaxBuiltBytes = size_t{64} << 20;

Value apply_filter(Interpreter& in, const std::string& name, Value operand, CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& operand, CallArgs& args);

// obj.name with the sandbox's rules: methods of str/dict/list (mutating ones refused), then
// dict keys; Undefined when absent.
Value get_attribute(const Value& obj, const std::string& name);
// obj[key] with Jinja2's fallback to attributes; Undefined when absent.
Value get_item(const Value& obj, const Value& key);
// obj[start:stop:step] for lists, tuples and strings.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

Value binary_op(const std::string& op, const Value& a, const Value& b);
Value unary_op(const std::string& op, const Value& a);
// ==, !=, <, <=, >, >=, in, not in.
bool compare_op(const std::string& op, const Value& a, const Value& b);
// The items a for loop visits (dict keys, string characters; Undefined is empty).
std::vector<Value> iterate(const Value& v);

// range, namespace, dict, raise_exception, strftime_now.
struct Frame;
void add_globals(Frame& frame);

// Throws the UndefinedError for `v` when it is undefined.
void require_defined(const Value& v);

}  // namespace kiln::jinja
