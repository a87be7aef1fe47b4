// Tree-walking evaluation. Errors thrown by builtins carry no position; the innermost expression
// or statement that sees one stamps its own offset on it.
#include "tokenizer/jinja/interpreter.h"

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/template_error.h"

namespace kiln::jinja {
namespace {

// Stamps `offset` on errors that have none yet.
template <typename F>
auto at(size_t offset, F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (TemplateError& e) {
    if (e.offset == TemplateError::kNoOffset) e.offset = offset;
    throw;
  }
}

}  // namespace

const Value* Frame::find(const std::string& name) const {
  for (const Frame* f = this; f != nullptr; f = f->parent.get()) {
    for (const auto& [k, v] : f->vars) {
      if (k == name) return &v;
    }
  }
  return nullptr;
}

void Frame::set(const std::string& name, Value value) {
  for (auto& [k, v] : vars) {
    if (k == name) {
      v = std::move(value);
      return;
    }
  }
  vars.emplace_back(name, std::move(value));
}

void unpack_into(Frame& frame, const std::vector<std::string>& names, bool tuple, const Value& value) {
  if (!tuple) {
    frame.set(names[0], value);
    return;
  }
  require_defined(value);
  const std::vector<Value> items = iterate(value);
  if (items.size() != names.size()) {
    throw TemplateError(items.size() > names.size()
                            ? "too many values to unpack (expected " + std::to_string(names.size()) + ")"
                            : "not enough values to unpack (expected " + std::to_string(names.size()) + ", got " +
                                  std::to_string(items.size()) + ")");
  }
  for (size_t i = 0; i < names.size(); ++i) frame.set(names[i], items[i]);
}

void Interpreter::render(const Body& body, std::string& out) {
  if (render_body(body, out) != Flow::kNormal) throw TemplateError("'break' or 'continue' outside a loop");
}

Interpreter::Flow Interpreter::render_body(const Body& body, std::string& out) {
  for (const auto& node : body) {
    const Flow flow = render_node(*node, out);
    if (flow != Flow::kNormal) return flow;
  }
  return Flow::kNormal;
}

Interpreter::Flow Interpreter::render_node(const Node& node, std::string& out) {
  const Level level(*this);
  return at(node.offset, [&]() -> Flow {
    switch (node.kind) {
      case Node::Kind::kText:
        out += node.text;
        return Flow::kNormal;
      case Node::Kind::kOutput:
        out += eval(*node.expr).str();
        return Flow::kNormal;
      case Node::Kind::kIf:
        for (size_t i = 0; i < node.conditions.size(); ++i) {
          if (eval(*node.conditions[i]).truthy()) return render_body(node.bodies[i], out);
        }
        return render_body(node.else_body, out);
      case Node::Kind::kFor:
        render_for(node, out);
        return Flow::kNormal;
      case Node::Kind::kSet:
        render_set(node, out);
        return Flow::kNormal;
      case Node::Kind::kMacro:
        frame_->set(node.text, make_macro(node));
        return Flow::kNormal;
      case Node::Kind::kBreak:
        return Flow::kBreak;
      case Node::Kind::kContinue:
        return Flow::kContinue;
      case Node::Kind::kFilterBlock: {
        std::string captured;
        const Flow flow = render_body(node.body, captured);
        out += eval_filter_chain(*node.expr, Value(std::move(captured))).str();
        return flow;
      }
      case Node::Kind::kScope:
        return render_body(node.body, out);
    }
    return Flow::kNormal;
  });
}

void Interpreter::render_for(const Node& node, std::string& out) {
  const Value iterable = eval(*node.expr);
  if (!iterable.is_undefined() && !iterable.is_list() && !iterable.is_dict() && !iterable.is_string()) {
    throw TemplateError("'" + iterable.type_name() + "' object is not iterable");
  }
  std::vector<Value> items = iterate(iterable);
  // Each iteration gets a fresh scope: assignments in the body neither leak out of the loop nor
  // carry over to the next iteration (Jinja2's semantics).
  const std::shared_ptr<Frame> outer = frame_;
  struct Restore {
    std::shared_ptr<Frame>& frame;
    std::shared_ptr<Frame> saved;
    ~Restore() { frame = saved; }
  } restore{frame_, outer};
  auto fresh_scope = [&] {
    frame_ = std::make_shared<Frame>();
    frame_->parent = outer;
  };
  if (node.filter) {
    std::vector<Value> kept;
    for (const Value& item : items) {
      step();
      fresh_scope();
      unpack_into(*frame_, node.targets, node.target_is_tuple, item);
      if (eval(*node.filter).truthy()) kept.push_back(item);
    }
    items = std::move(kept);
  }
  const auto n = static_cast<int64_t>(items.size());
  for (int64_t i = 0; i < n; ++i) {
    step();  // an empty body evaluates nothing, yet nested loops still take their time
    fresh_scope();
    unpack_into(*frame_, node.targets, node.target_is_tuple, items[i]);
    Value loop = Value::dict();
    Dict& d = loop.as_dict();
    d.items = {{"index", Value(i + 1)},
               {"index0", Value(i)},
               {"revindex", Value(n - i)},
               {"revindex0", Value(n - i - 1)},
               {"first", Value(i == 0)},
               {"last", Value(i == n - 1)},
               {"length", Value(n)},
               {"depth", Value(1)},
               {"depth0", Value(0)},
               {"previtem", i > 0 ? items[i - 1] : Value::undefined("there is no previous item")},
               {"nextitem", i + 1 < n ? items[i + 1] : Value::undefined("there is no next item")}};
    d.set("cycle", Value::callable("loop.cycle", [i](Interpreter&, CallArgs& args) -> Value {
            if (args.positional.empty()) throw TemplateError("no items for cycling given");
            return args.positional[static_cast<size_t>(i) % args.positional.size()];
          }));
    frame_->set("loop", loop);
    if (render_body(node.body, out) == Flow::kBreak) break;
  }
  frame_ = outer;
  if (n == 0) render_body(node.else_body, out);
}

void Interpreter::render_set(const Node& node, std::string& out) {
  Value value;
  if (node.expr) {
    value = eval(*node.expr);
  } else {
    std::string captured;
    render_body(node.body, captured);
    value = node.filter ? eval_filter_chain(*node.filter, Value(std::move(captured))) : Value(std::move(captured));
  }
  if (!node.text.empty()) {
    const Value* target = frame_->find(node.targets[0]);
    if (target == nullptr || !target->is_dict() || !target->as_dict().is_namespace) {
      throw TemplateError("cannot assign attribute on non-namespace object '" + node.targets[0] + "'");
    }
    target->as_dict().set(node.text, std::move(value));
    return;
  }
  unpack_into(*frame_, node.targets, node.target_is_tuple, value);
}

void Interpreter::step() {
  if (++steps_ > kMaxRenderSteps)
    throw TemplateError("rendering takes more than " + std::to_string(kMaxRenderSteps) + " steps");
}

Interpreter::Level::Level(Interpreter& in) : in_(in) {
  if (in_.depth_ >= kMaxRenderDepth)
    throw TemplateError("rendering nests deeper than " + std::to_string(kMaxRenderDepth) + " levels");
  in_.step();
  ++in_.depth_;
}

Interpreter::~Interpreter() {
  for (const std::shared_ptr<Frame>& f : closures_) f->vars.clear();
  for (Value& ns : namespaces_) ns.as_dict().items.clear();
}

Value Interpreter::make_macro(const Node& node) {
  std::shared_ptr<Frame> closure = frame_;
  closures_.push_back(closure);
  const Node* def = &node;
  return Value::callable(node.text, [closure, def](Interpreter& in, CallArgs& args) -> Value {
    if (in.macro_depth_ >= kMaxMacroDepth)
      throw TemplateError("macro '" + def->text + "': more than " + std::to_string(kMaxMacroDepth) +
                          " macro calls inside one another");
    struct Depth {
      int& depth;
      explicit Depth(int& d) : depth(++d) {}
      ~Depth() { --depth; }
    } depth(in.macro_depth_);
    if (args.positional.size() > def->targets.size()) {
      throw TemplateError("macro '" + def->text + "' takes not more than " + std::to_string(def->targets.size()) +
                          " argument(s)");
    }
    auto frame = std::make_shared<Frame>();
    frame->parent = closure;
    std::vector<bool> bound(def->targets.size(), false);
    for (size_t i = 0; i < args.positional.size(); ++i) {
      frame->set(def->targets[i], args.positional[i]);
      bound[i] = true;
    }
    for (auto& [name, value] : args.keywords) {
      size_t i = 0;
      while (i < def->targets.size() && def->targets[i] != name) ++i;
      if (i == def->targets.size()) throw TemplateError("macro '" + def->text + "' has no argument named '" + name + "'");
      if (bound[i]) throw TemplateError("macro '" + def->text + "' got multiple values for argument '" + name + "'");
      frame->set(name, value);
      bound[i] = true;
    }
    std::swap(in.frame_, frame);  // in.frame_ is the macro's scope while its body renders
    struct Restore {
      std::shared_ptr<Frame>& frame;
      std::shared_ptr<Frame> saved;
      ~Restore() { frame = saved; }
    } restore{in.frame_, frame};
    for (size_t i = 0; i < def->targets.size(); ++i) {
      if (bound[i]) continue;
      // Defaults are evaluated in the macro's scope, so they can see earlier arguments.
      in.frame_->set(def->targets[i], def->defaults[i] ? in.eval(*def->defaults[i])
                                                       : Value::undefined("'" + def->targets[i] + "' is undefined"));
    }
    std::string out;
    in.render(def->body, out);
    return Value(std::move(out));
  });
}

CallArgs Interpreter::eval_args(const Expr& e) {
  CallArgs args;
  for (size_t i = 0; i < e.args.size(); ++i) {
    if (e.arg_names[i].empty()) {
      args.positional.push_back(eval(*e.args[i]));
    } else {
      args.keywords.emplace_back(e.arg_names[i], eval(*e.args[i]));
    }
  }
  return args;
}

Value Interpreter::eval_filter_chain(const Expr& e, Value innermost) {
  // A filter block's chain ends in a null operand (the captured body); an expression's chain ends
  // in an ordinary expression.
  const Expr* inner = e.items[0].get();
  Value operand = inner == nullptr                     ? std::move(innermost)
                  : inner->kind == Expr::Kind::kFilter ? eval_filter_chain(*inner, std::move(innermost))
                                                       : eval(*inner);
  CallArgs args = eval_args(e);
  return at(e.offset, [&] { return call_filter(e.name, std::move(operand), args); });
}

Value Interpreter::call_filter(const std::string& name, Value operand, CallArgs& args) {
  return apply_filter(*this, name, std::move(operand), args);
}

bool Interpreter::call_test(const std::string& name, const Value& operand, CallArgs& args) {
  return apply_test(*this, name, operand, args);
}

Value Interpreter::call(const Value& callee, CallArgs& args) {
  if (callee.is_undefined()) require_defined(callee);
  if (!callee.is_callable()) throw TemplateError("'" + callee.type_name() + "' object is not callable");
  return callee.as_callable().fn(*this, args);
}

Value Interpreter::eval(const Expr& e) {
  const Level level(*this);
  return at(e.offset, [&] { return eval_inner(e); });
}

Value Interpreter::eval_inner(const Expr& e) {
  switch (e.kind) {
    case Expr::Kind::kLiteral:
      return e.value;
    case Expr::Kind::kName: {
      const Value* v = frame_->find(e.name);
      return v ? *v : Value::undefined("'" + e.name + "' is undefined");
    }
    case Expr::Kind::kList:
    case Expr::Kind::kTuple: {
      std::vector<Value> items;
      for (const auto& item : e.items) items.push_back(eval(*item));
      return Value::list(std::move(items), e.kind == Expr::Kind::kTuple);
    }
    case Expr::Kind::kDict: {
      Value d = Value::dict();
      for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
        const Value key = eval(*e.items[i]);
        if (!key.is_string()) throw TemplateError("dict keys of type '" + key.type_name() + "' are not supported");
        d.as_dict().set(key.as_string(), eval(*e.items[i + 1]));
      }
      return d;
    }
    case Expr::Kind::kAttribute:
      return get_attribute(eval(*e.items[0]), e.name);
    case Expr::Kind::kItem:
      return get_item(eval(*e.items[0]), eval(*e.items[1]));
    case Expr::Kind::kSlice: {
      const Value obj = eval(*e.items[0]);
      auto bound = [&](size_t i) { return e.items[i] ? eval(*e.items[i]) : Value(None{}); };
      return get_slice(obj, bound(1), bound(2), bound(3));
    }
    case Expr::Kind::kCall: {
      const Value callee = eval(*e.items[0]);
      CallArgs args = eval_args(e);
      return call(callee, args);
    }
    case Expr::Kind::kFilter:
      return eval_filter_chain(e, Value());
    case Expr::Kind::kTest: {
      const Value operand = eval(*e.items[0]);
      CallArgs args = eval_args(e);
      return Value(call_test(e.name, operand, args) != e.negated);
    }
    case Expr::Kind::kUnary:
      if (e.name == "not") return Value(!eval(*e.items[0]).truthy());
      return unary_op(e.name, eval(*e.items[0]));
    case Expr::Kind::kBinary: {
      if (e.name == "and") {
        Value left = eval(*e.items[0]);
        return left.truthy() ? eval(*e.items[1]) : left;
      }
      if (e.name == "or") {
        Value left = eval(*e.items[0]);
        return left.truthy() ? left : eval(*e.items[1]);
      }
      const Value left = eval(*e.items[0]);
      const Value right = eval(*e.items[1]);
      return binary_op(e.name, left, right);
    }
    case Expr::Kind::kCompare: {
      Value left = eval(*e.items[0]);
      for (size_t i = 0; i < e.ops.size(); ++i) {
        Value right = eval(*e.items[i + 1]);
        if (!compare_op(e.ops[i], left, right)) return Value(false);
        left = std::move(right);
      }
      return Value(true);
    }
    case Expr::Kind::kCondition:
      if (eval(*e.items[1]).truthy()) return eval(*e.items[0]);
      return e.items[2] ? eval(*e.items[2]) : Value::undefined("the inline if expression evaluated to false and no else section was defined");
  }
  throw TemplateError("unknown expression");
}

}  // namespace kiln::jinja
