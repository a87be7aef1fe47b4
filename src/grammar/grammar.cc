// Building a Grammar: the expression constructors fold trivial cases (one-part sequences, a
// repeat of exactly once) so that front ends need not.
#include "grammar/grammar.h"

#include <utility>

namespace kiln::grammar {

RuleId Grammar::add_rule(std::string name) {
  rules_.push_back(Rule{std::move(name), -1});
  return static_cast<RuleId>(rules_.size() - 1);
}

void Grammar::set_body(RuleId rule, ExprId body) { rules_[rule].body = body; }

ExprId Grammar::add(Expr e) {
  exprs_.push_back(std::move(e));
  return static_cast<ExprId>(exprs_.size() - 1);
}

ExprId Grammar::empty() { return add(Expr{}); }

ExprId Grammar::bytes(const ByteSet& set) {
  Expr e;
  e.kind = ExprKind::kBytes;
  e.bytes = set;
  return add(std::move(e));
}

ExprId Grammar::literal(std::string_view text) {
  std::vector<ExprId> parts;
  parts.reserve(text.size());
  for (char c : text) parts.push_back(byte(static_cast<uint8_t>(c)));
  return seq(std::move(parts));
}

ExprId Grammar::ref(RuleId rule) {
  Expr e;
  e.kind = ExprKind::kRule;
  e.rule = rule;
  return add(std::move(e));
}

ExprId Grammar::seq(std::vector<ExprId> parts) {
  if (parts.empty()) return empty();
  if (parts.size() == 1) return parts[0];
  Expr e;
  e.kind = ExprKind::kSeq;
  e.children = std::move(parts);
  return add(std::move(e));
}

ExprId Grammar::alt(std::vector<ExprId> options) {
  if (options.size() == 1) return options[0];
  Expr e;
  e.kind = ExprKind::kAlt;  // no options: the empty language
  e.children = std::move(options);
  return add(std::move(e));
}

ExprId Grammar::repeat(ExprId inner, int32_t min, int32_t max) {
  if (min == 1 && max == 1) return inner;
  if (max == 0) return empty();
  Expr e;
  e.kind = ExprKind::kRepeat;
  e.min = min;
  e.max = max;
  e.children = {inner};
  return add(std::move(e));
}

}  // namespace kiln::grammar
