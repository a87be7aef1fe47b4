// Evaluates a parsed template against a context, with Jinja2's scoping (for loops and macros get
// their own scope; if does not), loop variables, loop controls and the sandbox's refusal to
// mutate lists and dicts.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/value.h"

namespace kiln::jinja {

struct Frame {
  std::vector<std::pair<std::string, Value>> vars;
  std::shared_ptr<Frame> parent;
  const Value* find(const std::string& name) const;
  void set(const std::string& name, Value value);
};

class Interpreter {
 public:
  explicit Interpreter(std::shared_ptr<Frame> globals) : frame_(std::move(globals)) {}

  // Renders `body` into `out`; throws TemplateError (with the offset of the failing node).
  void render(const Body& body, std::string& out);

  Value eval(const Expr& e);
  // Filters and tests by name, for filters such as map() and select() that take other filters.
  Value call_filter(const std::string& name, Value operand, CallArgs& args);
  bool call_test(const std::string& name, const Value& operand, CallArgs& args);
  Value call(const Value& callee, CallArgs& args);

 private:
  enum class Flow { kNormal, kBreak, kContinue };
  Flow render_body(const Body& body, std::string& out);
  Flow render_node(const Node& node, std::string& out);
  void render_for(const Node& node, std::string& out);
  void render_set(const Node& node, std::string& out);
  Value make_macro(const Node& node);
  Value eval_inner(const Expr& e);
  Value eval_filter_chain(const Expr& e, Value innermost);
  CallArgs eval_args(const Expr& e);

  std::shared_ptr<Frame> frame_;
};

// Assigns `value` to `names` (unpacking when `tuple`), as a for loop or set does.
void unpack_into(Frame& frame, const std::vector<std::string>& names, bool tuple, const Value& value);

}  // namespace kiln::jinja
