// A context-free grammar over bytes: named rules whose bodies are expressions (byte sets,
// sequences, alternatives, bounded or unbounded repeats, references to rules). Every front end
// (GBNF, regular expressions, JSON Schema) builds one; compile_grammar turns it into automata.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::grammar {

using ExprId = int32_t;
using RuleId = int32_t;

// A set of byte values, one bit each.
struct ByteSet {
  std::array<uint64_t, 4> bits{};

  static ByteSet of(uint8_t b) { ByteSet s; s.add(b); return s; }
  static ByteSet range(uint8_t lo, uint8_t hi) { ByteSet s; s.add_range(lo, hi); return s; }
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  void add_all(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet&) const = default;
};

enum class ExprKind : uint8_t {
  kEmpty,   // the empty string
  kBytes,   // one byte from `bytes`
  kRule,    // the language of rule `rule`
  kSeq,     // children one after another
  kAlt,     // any one child
  kRepeat,  // children[0] between `min` and `max` times (max kUnbounded: no limit)
};

struct Expr {
  static constexpr int32_t kUnbounded = -1;
  ExprKind kind = ExprKind::kEmpty;
  ByteSet bytes;
  RuleId rule = -1;
  int32_t min = 0, max = 0;
  std::vector<ExprId> children;
};

class Grammar {
 public:
  // Declares a rule (its body set later, so rules may refer to each other in any order). Names
  // are for messages; they need not be unique, though GBNF's are.
  RuleId add_rule(std::string name);
  void set_body(RuleId rule, ExprId body);
  void set_root(RuleId rule) { root_ = rule; }

  ExprId empty();
  ExprId bytes(const ByteSet& set);
  ExprId byte(uint8_t b) { return bytes(ByteSet::of(b)); }
  ExprId literal(std::string_view text);  // the bytes of `text` in order
  ExprId ref(RuleId rule);
  ExprId seq(std::vector<ExprId> parts);
  ExprId alt(std::vector<ExprId> options);
  ExprId repeat(ExprId e, int32_t min, int32_t max);
  ExprId optional(ExprId e) { return repeat(e, 0, 1); }
  ExprId star(ExprId e) { return repeat(e, 0, Expr::kUnbounded); }

  RuleId root() const { return root_; }
  size_t rule_count() const { return rules_.size(); }
  const std::string& rule_name(RuleId r) const { return rules_[r].name; }
  ExprId rule_body(RuleId r) const { return rules_[r].body; }  // -1 while unset
  size_t expr_count() const { return exprs_.size(); }
  const Expr& expr(ExprId e) const { return exprs_[e]; }

 private:
  struct Rule {
    std::string name;
    ExprId body = -1;
  };
  ExprId add(Expr e);

  std::vector<Rule> rules_;
  std::vector<Expr> exprs_;
  RuleId root_ = -1;
};

}  // namespace kiln::grammar
