// Recursive descent with Jinja2's grammar and operator precedence:
//   condexpr: or ['if' or ['else' condexpr]]     or: and ('or' and)*     and: not ('and' not)*
//   not: 'not' not | compare                     compare: math1 (cmp math1)*
//   math1: concat (('+'|'-') concat)*            concat: math2 ('~' math2)*
//   math2: pow (('*'|'/'|'//'|'%') pow)*         pow: unary ('**' unary)*
//   unary: ('-'|'+') unary | primary postfix (filter | test | call)*
#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <cstdlib>
#include <set>

#include "tokenizer/jinja/template_error.h"

namespace kiln::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : t_(tokens) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != T::kEnd) fail("unexpected token");
    return body;
  }

 private:
  // One level of nesting per step(), given back when it goes out of scope.
  class Deeper {
   public:
    explicit Deeper(Parser& p) : p_(p) {}
    ~Deeper() { p_.depth_ -= steps_; }
    void step() {
      ++steps_;
      if (++p_.depth_ > kMaxTemplateNesting)
        p_.fail("the template nests deeper than " + std::to_string(kMaxTemplateNesting) + " levels");
    }

   private:
    Parser& p_;
    int steps_ = 0;
  };

  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t n = 1) const { return t_[std::min(i_ + n, t_.size() - 1)]; }
  const Token& advance() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  [[noreturn]] void fail(const std::string& message) const { fail_at(message, cur()); }
  [[noreturn]] void fail_at(const std::string& message, const Token& tok) const {
    throw TemplateError(message + (tok.type == T::kEnd ? " (at end of template)" : " near " + describe(tok)), tok.offset);
  }
  static std::string describe(const Token& tok) {
    switch (tok.type) {
      case T::kText: return "text";
      case T::kVariableBegin: return "'{{'";
      case T::kVariableEnd: return "'}}'";
      case T::kBlockBegin: return "'{%'";
      case T::kBlockEnd: return "'%}'";
      case T::kString: return "string literal";
      case T::kEnd: return "end of template";
      default: return "'" + tok.value + "'";
    }
  }

  bool is_op(const char* op) const { return cur().type == T::kOperator && cur().value == op; }
  bool is_name(const char* name) const { return cur().type == T::kName && cur().value == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "'");
  }
  std::string expect_name() {
    if (cur().type != T::kName) fail("expected a name");
    return advance().value;
  }
  void expect_block_end() {
    if (cur().type != T::kBlockEnd) fail("expected '%}'");
    advance();
  }

  // Statements up to (not including) "{% name" for a name in `ends`.
  Body parse_body(const std::set<std::string>& ends) {
    Body body;
    while (true) {
      const Token& tok = cur();
      if (tok.type == T::kEnd) {
        if (!ends.empty()) {
          std::string end = *ends.begin();
          for (const auto& e : ends) {
            if (e.rfind("end", 0) == 0) end = e;
          }
          fail("missing '{% " + end + " %}'");
        }
        return body;
      }
      if (tok.type == T::kText) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kText;
        n->offset = tok.offset;
        n->text = tok.value;
        body.push_back(std::move(n));
        advance();
      } else if (tok.type == T::kVariableBegin) {
        auto n = std::make_unique<Node>();
        n->kind = Node::Kind::kOutput;
        n->offset = tok.offset;
        advance();
        n->expr = parse_tuple(true);
        if (cur().type != T::kVariableEnd) fail("expected '}}'");
        advance();
        body.push_back(std::move(n));
      } else if (tok.type == T::kBlockBegin) {
        const Token& name = peek();
        if (name.type == T::kName && ends.count(name.value)) return body;
        advance();
        body.push_back(parse_statement());
      } else {
        fail("unexpected token");
      }
    }
  }

  // After "{%": the tag name and the rest.
  NodePtr parse_statement() {
    Deeper deeper(*this);
    deeper.step();
    const Token& tok = cur();
    if (tok.type != T::kName) fail("expected a tag name");
    const std::string& name = tok.value;
    auto n = std::make_unique<Node>();
    n->offset = tok.offset;
    if (name == "if") {
      advance();
      n->kind = Node::Kind::kIf;
      n->conditions.push_back(parse_tuple(true));
      expect_block_end();
      while (true) {
        n->bodies.push_back(parse_body({"elif", "else", "endif"}));
        advance();  // '{%'
        const std::string which = advance().value;
        if (which == "elif") {
          n->conditions.push_back(parse_tuple(true));
          expect_block_end();
        } else if (which == "else") {
          expect_block_end();
          n->else_body = parse_body({"endif"});
          advance();
          advance();
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
      return n;
    }
    if (name == "for") {
      advance();
      n->kind = Node::Kind::kFor;
      parse_targets(*n);
      if (!skip_name("in")) fail("expected 'in'");
      n->expr = parse_tuple(false);
      if (skip_name("if")) n->filter = parse_expression(true);
      if (is_name("recursive")) fail("recursive loops are not supported");
      expect_block_end();
      n->body = parse_body({"endfor", "else"});
      advance();
      if (advance().value == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"});
        advance();
        advance();
      }
      expect_block_end();
      return n;
    }
    if (name == "set") {
      advance();
      n->kind = Node::Kind::kSet;
      if (cur().type == T::kName && peek().type == T::kOperator && peek().value == ".") {
        n->targets.push_back(advance().value);
        advance();
        n->text = expect_name();  // namespace attribute
      } else {
        parse_targets(*n);
      }
      if (skip_op("=")) {
        n->expr = parse_tuple(true);
        expect_block_end();
        return n;
      }
      if (n->target_is_tuple || !n->text.empty()) fail("a block set takes one name");
      if (is_op("|")) n->filter = parse_filter_chain(nullptr);
      expect_block_end();
      n->body = parse_body({"endset"});
      advance();
      advance();
      expect_block_end();
      return n;
    }
    if (name == "macro") {
      advance();
      n->kind = Node::Kind::kMacro;
      n->text = expect_name();
      expect_op("(");
      while (!is_op(")")) {
        if (!n->targets.empty()) expect_op(",");
        if (is_op(")")) break;
        n->targets.push_back(expect_name());
        n->defaults.push_back(skip_op("=") ? parse_expression(true) : nullptr);
      }
      advance();
      expect_block_end();
      n->body = parse_body({"endmacro"});
      advance();
      advance();
      expect_block_end();
      return n;
    }
    if (name == "break" || name == "continue") {
      advance();
      n->kind = name == "break" ? Node::Kind::kBreak : Node::Kind::kContinue;
      expect_block_end();
      return n;
    }
    if (name == "filter") {
      advance();
      n->kind = Node::Kind::kFilterBlock;
      n->expr = parse_filter_chain(nullptr, /*leading_pipe=*/false);
      expect_block_end();
      n->body = parse_body({"endfilter"});
      advance();
      advance();
      expect_block_end();
      return n;
    }
    if (name == "generation") {
      // HF's AssistantTracker extension: marks assistant text for masks; renders its body.
      advance();
      n->kind = Node::Kind::kScope;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      advance();
      advance();
      expect_block_end();
      return n;
    }
    static const std::set<std::string> kUnsupported = {"include", "import", "from", "extends", "block", "call",
                                                       "with", "autoescape", "do", "trans"};
    if (kUnsupported.count(name)) fail("the '" + name + "' tag is not supported");
    if (name.rfind("end", 0) == 0 || name == "elif" || name == "else") fail("unexpected '" + name + "'");
    fail("unknown tag '" + name + "'");
  }

  // Loop / assignment targets: "a" or "a, b" or "(a, b)".
  void parse_targets(Node& n) {
    const bool parens = skip_op("(");
    n.targets.push_back(expect_name());
    while (skip_op(",")) {
      n.target_is_tuple = true;
      if (cur().type != T::kName) break;
      n.targets.push_back(expect_name());
    }
    if (parens) {
      expect_op(")");
      n.target_is_tuple = true;
    }
  }

  Value integer_literal(const Token& tok) const {
    int64_t v = 0;
    const auto [end, ec] = std::from_chars(tok.value.data(), tok.value.data() + tok.value.size(), v);
    if (ec != std::errc() || end != tok.value.data() + tok.value.size()) fail_at("integer literal out of range", tok);
    return Value(v);
  }

  ExprPtr make(Expr::Kind kind, size_t offset) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->offset = offset;
    return e;
  }

  // expression ("," expression)* -> a tuple when there is a comma.
  ExprPtr parse_tuple(bool with_condexpr) {
    const size_t offset = cur().offset;
    ExprPtr first = parse_expression(with_condexpr);
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, offset);
    tuple->items.push_back(std::move(first));
    while (skip_op(",")) {
      if (cur().type == T::kBlockEnd || cur().type == T::kVariableEnd || is_op(")") || is_name("if")) break;
      tuple->items.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    Deeper deeper(*this);
    deeper.step();
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    Deeper deeper(*this);
    while (is_name("if")) {
      deeper.step();
      const size_t offset = advance().offset;
      auto cond = make(Expr::Kind::kCondition, offset);
      cond->items.push_back(std::move(expr));
      cond->items.push_back(parse_or());
      cond->items.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      expr = std::move(cond);
    }
    return expr;
  }

  ExprPtr binary(const std::string& op, ExprPtr left, ExprPtr right, size_t offset) {
    auto e = make(Expr::Kind::kBinary, offset);
    e->name = op;
    e->items.push_back(std::move(left));
    e->items.push_back(std::move(right));
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    Deeper deeper(*this);
    while (is_name("or")) {
      deeper.step();
      const size_t offset = advance().offset;
      left = binary("or", std::move(left), parse_and(), offset);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    Deeper deeper(*this);
    while (is_name("and")) {
      deeper.step();
      const size_t offset = advance().offset;
      left = binary("and", std::move(left), parse_not(), offset);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      Deeper deeper(*this);
      deeper.step();
      auto e = make(Expr::Kind::kUnary, advance().offset);
      e->name = "not";
      e->items.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    const size_t offset = cur().offset;
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> cmp;
    while (true) {
      std::string op;
      if (cur().type == T::kOperator &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        op = advance().value;
      } else if (is_name("in")) {
        advance();
        op = "in";
      } else if (is_name("not") && peek().type == T::kName && peek().value == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, offset);
        cmp->items.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->items.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    Deeper deeper(*this);
    while (is_op("+") || is_op("-")) {
      deeper.step();
      const Token& op = advance();
      left = binary(op.value, std::move(left), parse_concat(), op.offset);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    Deeper deeper(*this);
    while (is_op("~")) {
      deeper.step();
      const size_t offset = advance().offset;
      left = binary("~", std::move(left), parse_math2(), offset);
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    Deeper deeper(*this);
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      deeper.step();
      const Token& op = advance();
      left = binary(op.value, std::move(left), parse_pow(), op.offset);
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    Deeper deeper(*this);
    while (is_op("**")) {
      deeper.step();
      const size_t offset = advance().offset;
      left = binary("**", std::move(left), parse_unary(true), offset);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      Deeper deeper(*this);
      deeper.step();
      const Token& op = advance();
      node = make(Expr::Kind::kUnary, op.offset);
      node->name = op.value;
      node->items.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& tok = cur();
    switch (tok.type) {
      case T::kName: {
        advance();
        const std::string& v = tok.value;
        auto e = make(Expr::Kind::kLiteral, tok.offset);
        if (v == "true" || v == "True") e->value = Value(true);
        else if (v == "false" || v == "False") e->value = Value(false);
        else if (v == "none" || v == "None") e->value = Value(None{});
        else {
          e->kind = Expr::Kind::kName;
          e->name = v;
        }
        return e;
      }
      case T::kString: {
        std::string s;
        const size_t offset = tok.offset;
        while (cur().type == T::kString) s += advance().value;  // adjacent literals concatenate
        auto e = make(Expr::Kind::kLiteral, offset);
        e->value = Value(std::move(s));
        return e;
      }
      case T::kInteger: {
        advance();
        auto e = make(Expr::Kind::kLiteral, tok.offset);
        e->value = integer_literal(tok);
        return e;
      }
      case T::kFloat: {
        advance();
        auto e = make(Expr::Kind::kLiteral, tok.offset);
        // strtod, not stod: out of range is inf or 0, as Python's float() reads it, not an exception.
        e->value = Value(std::strtod(tok.value.c_str(), nullptr));
        return e;
      }
      case T::kOperator:
        if (tok.value == "(") {
          advance();
          if (skip_op(")")) {
            auto e = make(Expr::Kind::kTuple, tok.offset);
            return e;
          }
          ExprPtr inner = parse_expression(true);
          if (is_op(",")) {
            auto tuple = make(Expr::Kind::kTuple, tok.offset);
            tuple->items.push_back(std::move(inner));
            while (skip_op(",")) {
              if (is_op(")")) break;
              tuple->items.push_back(parse_expression(true));
            }
            inner = std::move(tuple);
          }
          expect_op(")");
          return inner;
        }
        if (tok.value == "[") {
          advance();
          auto e = make(Expr::Kind::kList, tok.offset);
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        if (tok.value == "{") {
          advance();
          auto e = make(Expr::Kind::kDict, tok.offset);
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression(true));
            expect_op(":");
            e->items.push_back(parse_expression(true));
          }
          advance();
          return e;
        }
        break;
      default:
        break;
    }
    fail("unexpected " + describe(tok) + ", expected an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    Deeper deeper(*this);
    while (true) {
      if (is_op(".") || is_op("[") || is_op("(")) deeper.step();
      if (is_op(".")) {
        const size_t offset = advance().offset;
        if (cur().type == T::kName) {
          auto e = make(Expr::Kind::kAttribute, offset);
          e->name = advance().value;
          e->items.push_back(std::move(node));
          node = std::move(e);
        } else if (cur().type == T::kInteger) {
          auto e = make(Expr::Kind::kItem, offset);
          e->items.push_back(std::move(node));
          auto index = make(Expr::Kind::kLiteral, cur().offset);
          index->value = integer_literal(advance());
          e->items.push_back(std::move(index));
          node = std::move(e);
        } else {
          fail("expected an attribute name after '.'");
        }
      } else if (is_op("[")) {
        node = parse_subscript(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const size_t offset = advance().offset;  // '['
    ExprPtr bounds[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) fail("too many ':' in a slice");
        continue;
      }
      if (bounds[part]) fail("expected ':' or ']'");
      bounds[part] = parse_expression(true);
      if (!is_slice && is_op(",")) fail("tuple subscripts are not supported");
    }
    advance();
    if (!is_slice) {
      if (!bounds[0]) fail("empty subscript");
      auto e = make(Expr::Kind::kItem, offset);
      e->items.push_back(std::move(object));
      e->items.push_back(std::move(bounds[0]));
      return e;
    }
    auto e = make(Expr::Kind::kSlice, offset);
    e->items.push_back(std::move(object));
    for (auto& b : bounds) e->items.push_back(std::move(b));
    return e;
  }

  void parse_call_args(Expr& e) {
    expect_op("(");
    while (!is_op(")")) {
      if (!e.args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail("*args and **kwargs in calls are not supported");
      std::string keyword;
      if (cur().type == T::kName && peek().type == T::kOperator && peek().value == "=") {
        keyword = advance().value;
        advance();
      } else if (!e.arg_names.empty() && !e.arg_names.back().empty()) {
        fail("positional argument after a keyword argument");
      }
      e.args.push_back(parse_expression(true));
      e.arg_names.push_back(keyword);
    }
    advance();
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, cur().offset);
    e->items.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    Deeper deeper(*this);
    while (true) {
      if (is_op("|") || is_name("is") || is_op("(")) deeper.step();
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node), true, /*single=*/true);
      } else if (is_name("is")) {
        node = parse_test(std::move(node));
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  // "| name(args)" repeated (or one when `single`); with `leading_pipe` false the first filter
  // has no pipe ({% filter upper | trim %}).
  ExprPtr parse_filter_chain(ExprPtr operand, bool leading_pipe = true, bool single = false) {
    Deeper deeper(*this);
    bool first = true;
    while (true) {
      if (!(first && !leading_pipe)) {
        if (!skip_op("|")) break;
      }
      deeper.step();
      first = false;
      auto e = make(Expr::Kind::kFilter, cur().offset);
      e->name = expect_name();
      while (skip_op(".")) e->name.append(".").append(expect_name());
      e->items.push_back(std::move(operand));
      if (is_op("(")) parse_call_args(*e);
      operand = std::move(e);
      if (single) break;
    }
    return operand;
  }

  ExprPtr parse_test(ExprPtr operand) {
    auto e = make(Expr::Kind::kTest, advance().offset);  // 'is'
    e->negated = skip_name("not");
    e->name = expect_name();
    e->items.push_back(std::move(operand));
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((cur().type == T::kName || cur().type == T::kString || cur().type == T::kInteger ||
                cur().type == T::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) fail("you cannot chain multiple tests with 'is'");
      e->args.push_back(parse_postfix(parse_primary()));
      e->arg_names.push_back("");
    }
    return e;
  }

  const std::vector<Token>& t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace kiln::jinja
