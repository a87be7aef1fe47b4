// Evaluates a parsed template against a context, with Jinja2's scoping (for loops and macros get
// their own scope; if does not), loop variables, loop controls and the sandbox's refusal to
// mutate lists and dicts.
#pragma once

#include <cstdint>
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
  // Empties the scopes macros closed over and the namespaces made: a macro kept in the scope it
  // closes over, or a namespace that holds itself, is a cycle of shared pointers that would
  // otherwise outlive the render.
  ~Interpreter();
  Interpreter(const Interpreter&) = delete;
  Interpreter& operator=(const Interpreter&) = delete;

  // Renders `body` into `out`; throws TemplateError (with the offset of the failing node).
  void render(const Body& body, std::string& out);

  Value eval(const Expr& e);
  // Filters and tests by name, for filters such as map() and select() that take other filters.
  Value call_filter(const std::string& name, Value operand, CallArgs& args);
  bool call_test(const std::string& name, const Value& operand, CallArgs& args);
  Value call(const Value& callee, CallArgs& args);
  // namespace() registers what it makes, to be emptied with the interpreter.
  void track_namespace(const Value& ns) { namespaces_.push_back(ns); }

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
  std::vector<std::shared_ptr<Frame>> closures_;  // scopes macros closed over
  std::vector<Value> namespaces_;
  int macro_depth_ = 0;  // macros being rendered, one inside another
  int depth_ = 0;        // expressions and nodes being evaluated, one inside another
  int64_t steps_ = 0;    // expressions and nodes evaluated so far

  // Counts one step of work (an expression, a node, a loop iteration) against kMaxRenderSteps.
  void step();
  // One level of depth_ while it lives, and one step; refused past kMaxRenderDepth.
  class Level {
   public:
    explicit Level(Interpreter& in);
    ~Level() { --in_.depth_; }

   private:
    Interpreter& in_;
  };
};

// Macros rendering inside one another: Python's recursion limit, for a template that recurses
// without end, long before a thread's stack runs out.
inline constexpr int kMaxMacroDepth = 100;
// Expressions and nodes inside one another while rendering: a template's own nesting is at most
// kMaxTemplateNesting, but macros calling macros multiply it. A guard for the thread's stack.
inline constexpr int kMaxRenderDepth = 2000;
// Steps (expressions, nodes, loop iterations) one render may take: loops over range() nest
// without bound, and a server thread must not render forever. The Qwen3 template takes about 50 a
// message (50,079 for 1,000 messages with a tool), so 10^6 is some 20,000 messages.
inline constexpr int64_t kMaxRenderSteps = 1'000'000;

// Assigns `value` to `names` (unpacking when `tuple`), as a for loop or set does.
void unpack_into(Frame& frame, const std::vector<std::string>& names, bool tuple, const Value& value);

}  // namespace kiln::jinja
