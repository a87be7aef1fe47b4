// compile_grammar: rules called from one place, or small, are inlined into their callers; each
// remaining rule becomes a Thompson NFA (repeats unrolled) and then a DFA by subset construction
// over byte classes and calls; states that cannot finish are trimmed; left recursion is refused;
// each rule's follow bytes are computed for the token masks' precomputation.
#include "grammar/automaton.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <string_view>
#include <unordered_map>

namespace kiln::grammar {

namespace {

// Rules at most this size (NFA states, repeats unrolled) are inlined wherever they are called:
// a call costs a stack frame at run time and splits the token masks' precomputation.
constexpr int64_t kSmallRule = 16;
constexpr int64_t kSizeCap = int64_t{1} << 40;

int64_t saturating_add(int64_t a, int64_t b) { return std::min(kSizeCap, a + b); }
int64_t saturating_mul(int64_t a, int64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > kSizeCap / b ? kSizeCap : a * b;
}

// NFA copies of a repeat's body once unrolled.
int64_t repeat_copies(const Expr& e) { return e.max == Expr::kUnbounded ? int64_t{e.min} + 1 : e.max; }

struct Nfa {
  struct State {
    std::vector<int32_t> eps;
    std::vector<std::pair<int32_t, int32_t>> bytes;  // (byte set index, target)
    std::vector<std::pair<RuleId, int32_t>> calls;   // (rule, target)
  };
  std::vector<State> states;
  int32_t add() {
    states.emplace_back();
    return static_cast<int32_t>(states.size() - 1);
  }
};

}  // namespace

class AutomatonBuilder {
 public:
  AutomatonBuilder(const Grammar& g, const CompileLimits& limits) : g_(g), limits_(limits) {}

  Result<Automaton> build() {
    KILN_RETURN_IF_ERROR(check_bodies());
    compute_classes();
    plan_inlining();
    a_.rules_.resize(g_.rule_count());
    for (RuleId r = 0; r < static_cast<RuleId>(g_.rule_count()); ++r) a_.rules_[r].name = g_.rule_name(r);
    for (RuleId r : built_) {
      Nfa nfa;
      KILN_RETURN_IF_ERROR(build_nfa(r, nfa));
      KILN_RETURN_IF_ERROR(determinize(r, nfa));
    }
    for (Call& c : a_.calls_) c.start = a_.rules_[c.rule].start;
    a_.root_start_ = a_.rules_[g_.root()].start;
    KILN_RETURN_IF_ERROR(trim());
    KILN_RETURN_IF_ERROR(check_left_recursion());
    compute_follow();
    for (int32_t s = 0; s < a_.state_count(); ++s) {
      for (int32_t i = a_.call_begin_[s]; i < a_.call_begin_[s + 1]; ++i) {
        Call& c = a_.calls_[i];
        c.tail = a_.flags_[c.ret] == Automaton::kAccepting;
      }
    }
    return std::move(a_);
  }

 private:
  Status check_bodies() {
    if (g_.root() < 0 || static_cast<size_t>(g_.root()) >= g_.rule_count()) {
      return invalid_argument("the grammar has no root rule");
    }
    for (RuleId r = 0; r < static_cast<RuleId>(g_.rule_count()); ++r) {
      if (g_.rule_body(r) < 0) return invalid_argument("rule '" + g_.rule_name(r) + "' has no body");
    }
    return {};
  }

  // One class per set of bytes that every byte set of the grammar treats alike.
  void compute_classes() {
    std::array<int32_t, 256> cls{};
    int32_t n = 1;
    std::map<std::array<uint64_t, 4>, int32_t> seen;
    for (size_t e = 0; e < g_.expr_count(); ++e) {
      const Expr& x = g_.expr(static_cast<ExprId>(e));
      if (x.kind != ExprKind::kBytes) continue;
      auto [it, fresh] = seen.emplace(x.bytes.bits, static_cast<int32_t>(sets_.size()));
      set_of_expr_[static_cast<ExprId>(e)] = it->second;
      if (!fresh) continue;
      sets_.push_back(x.bytes);
      std::vector<int32_t> split(2 * static_cast<size_t>(n), -1);
      int32_t m = 0;
      for (int b = 0; b < 256; ++b) {
        int32_t& slot = split[2 * cls[b] + (x.bytes.has(static_cast<uint8_t>(b)) ? 1 : 0)];
        if (slot < 0) slot = m++;
        cls[b] = slot;
      }
      n = m;
    }
    a_.classes_ = n;
    for (int b = 0; b < 256; ++b) a_.class_of_[b] = static_cast<uint8_t>(cls[b]);
    set_classes_.resize(sets_.size());
    for (size_t i = 0; i < sets_.size(); ++i) {
      std::vector<bool> has(n, false);
      for (int b = 0; b < 256; ++b) {
        if (sets_[i].has(static_cast<uint8_t>(b))) has[cls[b]] = true;
      }
      for (int32_t c = 0; c < n; ++c) {
        if (has[c]) set_classes_[i].push_back(c);
      }
    }
  }

  // Calls of each rule's body, weighted by the NFA copies unrolled repeats make of them.
  void collect_calls(ExprId e, int64_t weight, std::vector<std::pair<RuleId, int64_t>>& out) const {
    const Expr& x = g_.expr(e);
    switch (x.kind) {
      case ExprKind::kRule: out.emplace_back(x.rule, weight); return;
      case ExprKind::kRepeat: collect_calls(x.children[0], saturating_mul(weight, repeat_copies(x)), out); return;
      case ExprKind::kSeq:
      case ExprKind::kAlt:
        for (ExprId c : x.children) collect_calls(c, weight, out);
        return;
      default: return;
    }
  }

  // NFA size of expression `e` with every non-recursive rule inlined.
  int64_t inlined_size(ExprId e) {
    auto memo = size_memo_.find(e);
    if (memo != size_memo_.end()) return memo->second;
    const Expr& x = g_.expr(e);
    int64_t size = 1;
    switch (x.kind) {
      case ExprKind::kRule: size = recursive_[x.rule] ? 1 : rule_size_[x.rule]; break;
      case ExprKind::kRepeat: size = saturating_mul(inlined_size(x.children[0]), repeat_copies(x)); break;
      case ExprKind::kSeq:
      case ExprKind::kAlt:
        for (ExprId c : x.children) size = saturating_add(size, inlined_size(c));
        break;
      default: break;
    }
    size_memo_[e] = size;
    return size;
  }

  void plan_inlining() {
    const size_t n = g_.rule_count();
    std::vector<std::vector<std::pair<RuleId, int64_t>>> calls(n);
    for (RuleId r = 0; r < static_cast<RuleId>(n); ++r) collect_calls(g_.rule_body(r), 1, calls[r]);

    // Tarjan's strongly connected components, iteratively; components come out callees first.
    std::vector<int32_t> index(n, -1), low(n, 0), comp(n, -1);
    std::vector<bool> on_stack(n, false);
    std::vector<RuleId> stack, order;
    std::vector<std::vector<RuleId>> components;
    int32_t counter = 0;
    for (RuleId s = 0; s < static_cast<RuleId>(n); ++s) {
      if (index[s] >= 0) continue;
      std::vector<std::pair<RuleId, size_t>> work{{s, 0}};
      index[s] = low[s] = counter++;
      stack.push_back(s);
      on_stack[s] = true;
      while (!work.empty()) {
        auto& [v, i] = work.back();
        if (i < calls[v].size()) {
          const RuleId w = calls[v][i++].first;
          if (index[w] < 0) {
            index[w] = low[w] = counter++;
            stack.push_back(w);
            on_stack[w] = true;
            work.emplace_back(w, 0);
          } else if (on_stack[w]) {
            low[v] = std::min(low[v], index[w]);
          }
          continue;
        }
        if (low[v] == index[v]) {
          components.emplace_back();
          RuleId w;
          do {
            w = stack.back();
            stack.pop_back();
            on_stack[w] = false;
            comp[w] = static_cast<int32_t>(components.size() - 1);
            components.back().push_back(w);
          } while (w != v);
        }
        const RuleId done = v;
        work.pop_back();
        if (!work.empty()) low[work.back().first] = std::min(low[work.back().first], low[done]);
      }
    }
    recursive_.assign(n, false);
    for (RuleId r = 0; r < static_cast<RuleId>(n); ++r) {
      if (components[comp[r]].size() > 1) recursive_[r] = true;
      for (const auto& [callee, w] : calls[r]) {
        if (callee == r) recursive_[r] = true;
      }
    }
    rule_size_.assign(n, 1);
    for (const auto& component : components) {  // callees first
      for (RuleId r : component) rule_size_[r] = inlined_size(g_.rule_body(r));
    }

    std::vector<bool> reachable(n, false);
    std::vector<RuleId> todo{g_.root()};
    reachable[g_.root()] = true;
    while (!todo.empty()) {
      const RuleId r = todo.back();
      todo.pop_back();
      for (const auto& [callee, w] : calls[r]) {
        if (!reachable[callee]) reachable[callee] = true, todo.push_back(callee);
      }
    }
    // Callers before callees: a non-recursive rule's every caller is decided before it is.
    inline_.assign(n, false);
    std::vector<int64_t> uses(n, 0);
    uses[g_.root()] = 1;
    for (auto c = components.rbegin(); c != components.rend(); ++c) {
      for (RuleId r : *c) {
        if (!reachable[r]) continue;
        inline_[r] = r != g_.root() && !recursive_[r] && (rule_size_[r] <= kSmallRule || uses[r] <= 1);
        for (const auto& [callee, w] : calls[r]) {
          uses[callee] = saturating_add(uses[callee], inline_[r] ? saturating_mul(w, uses[r]) : w);
        }
      }
    }
    for (RuleId r = 0; r < static_cast<RuleId>(n); ++r) {
      if (reachable[r] && !inline_[r]) built_.push_back(r);
    }
  }

  Status build_nfa(RuleId r, Nfa& nfa) {
    nfa.add();  // 0: start
    nfa.add();  // 1: accept
    current_rule_ = r;
    return add_expr(nfa, g_.rule_body(r), 0, 1);
  }

  Status too_large() const {
    return invalid_argument("rule '" + g_.rule_name(current_rule_) + "' unrolls to more than " +
                            std::to_string(limits_.max_nfa_states) +
                            " automaton states (lower its repeat counts or split it into rules)");
  }

  Status add_expr(Nfa& nfa, ExprId e, int32_t in, int32_t out) {
    if (nfa.states.size() > limits_.max_nfa_states) return too_large();
    const Expr& x = g_.expr(e);
    switch (x.kind) {
      case ExprKind::kEmpty: nfa.states[in].eps.push_back(out); return {};
      case ExprKind::kBytes: nfa.states[in].bytes.emplace_back(set_of_expr_.at(e), out); return {};
      case ExprKind::kRule:
        if (inline_[x.rule]) return add_expr(nfa, g_.rule_body(x.rule), in, out);
        nfa.states[in].calls.emplace_back(x.rule, out);
        return {};
      case ExprKind::kSeq: {
        int32_t cur = in;
        for (size_t i = 0; i < x.children.size(); ++i) {
          const int32_t next = i + 1 == x.children.size() ? out : nfa.add();
          KILN_RETURN_IF_ERROR(add_expr(nfa, x.children[i], cur, next));
          cur = next;
        }
        return {};
      }
      case ExprKind::kAlt:
        // Options share both ends: no construction here adds an edge into its `in` or out of its
        // `out` (loops run through fresh states), so no option can reach into another.
        for (ExprId c : x.children) KILN_RETURN_IF_ERROR(add_expr(nfa, c, in, out));
        return {};
      case ExprKind::kRepeat: {
        const ExprId body = x.children[0];
        if (static_cast<size_t>(x.min) > limits_.max_nfa_states) return too_large();
        int32_t cur = in;
        for (int32_t i = 0; i < x.min; ++i) {
          const int32_t next = nfa.add();
          KILN_RETURN_IF_ERROR(add_expr(nfa, body, cur, next));
          cur = next;
        }
        if (x.max == Expr::kUnbounded) {
          const int32_t loop = nfa.add(), back = nfa.add();
          nfa.states[cur].eps.push_back(loop);
          KILN_RETURN_IF_ERROR(add_expr(nfa, body, loop, back));
          nfa.states[back].eps.push_back(loop);
          nfa.states[loop].eps.push_back(out);
          return {};
        }
        if (static_cast<size_t>(x.max) > limits_.max_nfa_states) return too_large();
        for (int32_t i = x.min; i < x.max; ++i) {
          const int32_t next = nfa.add();
          KILN_RETURN_IF_ERROR(add_expr(nfa, body, cur, next));
          nfa.states[cur].eps.push_back(out);
          cur = next;
        }
        nfa.states[cur].eps.push_back(out);
        return {};
      }
    }
    return {};
  }

  // Subset construction of rule `r`'s NFA; its states are appended to the automaton's.
  Status determinize(RuleId r, const Nfa& nfa) {
    const int32_t offset = a_.state_count();
    const int32_t classes = a_.classes_;
    std::vector<uint32_t> stamp(nfa.states.size(), 0);
    uint32_t epoch = 0;
    std::vector<int32_t> dfs;
    auto closure = [&](std::vector<int32_t>& set) {
      ++epoch;
      dfs.assign(set.begin(), set.end());
      set.clear();
      while (!dfs.empty()) {
        const int32_t s = dfs.back();
        dfs.pop_back();
        if (stamp[s] == epoch) continue;
        stamp[s] = epoch;
        set.push_back(s);
        for (int32_t t : nfa.states[s].eps) dfs.push_back(t);
      }
      std::sort(set.begin(), set.end());
    };
    struct SetHash {
      size_t operator()(const std::vector<int32_t>& v) const {
        uint64_t h = 0x9E3779B97F4A7C15ULL ^ v.size();
        for (int32_t x : v) h = (h ^ static_cast<uint32_t>(x)) * 0x100000001B3ULL;
        return static_cast<size_t>(h ^ (h >> 29));
      }
    };
    std::unordered_map<std::vector<int32_t>, int32_t, SetHash> ids;
    std::vector<std::vector<int32_t>> subsets;
    auto intern = [&](std::vector<int32_t>& set) -> Result<int32_t> {
      closure(set);
      auto [it, fresh] = ids.emplace(set, static_cast<int32_t>(subsets.size()));
      if (fresh) {
        if (static_cast<size_t>(offset) + subsets.size() >= limits_.max_states) {
          return invalid_argument("rule '" + g_.rule_name(r) + "' needs more than " + std::to_string(limits_.max_states) +
                                  " automaton states (the grammar is too large or too ambiguous)");
        }
        subsets.push_back(set);
      }
      return it->second;
    };
    std::vector<int32_t> start{0};
    KILN_ASSIGN_OR_RETURN(int32_t unused, intern(start));
    (void)unused;
    a_.rules_[r].start = offset;
    std::vector<std::vector<int32_t>> buckets(classes);
    std::vector<int32_t> touched;
    std::map<RuleId, std::vector<int32_t>> call_targets;
    for (size_t d = 0; d < subsets.size(); ++d) {
      const int32_t gs = offset + static_cast<int32_t>(d);
      a_.trans_.resize(static_cast<size_t>(gs + 1) * classes, -1);
      a_.flags_.push_back(0);
      a_.rule_of_.push_back(r);
      a_.call_begin_.push_back(static_cast<int32_t>(a_.calls_.size()));
      touched.clear();
      call_targets.clear();
      bool accepting = false;
      for (int32_t s : subsets[d]) {
        if (s == 1) accepting = true;
        for (const auto& [set, target] : nfa.states[s].bytes) {
          for (int32_t c : set_classes_[set]) {
            if (buckets[c].empty()) touched.push_back(c);
            buckets[c].push_back(target);
          }
        }
        for (const auto& [rule, target] : nfa.states[s].calls) call_targets[rule].push_back(target);
      }
      if (accepting) a_.flags_[gs] |= Automaton::kAccepting;
      for (int32_t c : touched) {
        KILN_ASSIGN_OR_RETURN(const int32_t t, intern(buckets[c]));
        buckets[c].clear();
        a_.trans_[static_cast<size_t>(gs) * classes + c] = offset + t;
      }
      for (auto& [rule, targets] : call_targets) {
        KILN_ASSIGN_OR_RETURN(const int32_t t, intern(targets));
        a_.calls_.push_back(Call{rule, -1, offset + t, false});
      }
    }
    return {};
  }

  // Drops states from which no string can finish the rule (and calls of rules that cannot
  // finish), so that a live stack always has a completion.
  Status trim() {
    const int32_t n = a_.state_count();
    const int32_t classes = a_.classes_;
    a_.call_begin_.push_back(static_cast<int32_t>(a_.calls_.size()));  // the end of the last state's calls
    std::vector<std::vector<int32_t>> byte_preds(n);
    std::vector<std::vector<int32_t>> call_watchers(n);  // state -> calls waiting on it
    std::vector<int32_t> call_owner(a_.calls_.size());
    for (int32_t s = 0; s < n; ++s) {
      for (int32_t c = 0; c < classes; ++c) {
        const int32_t t = a_.trans_[static_cast<size_t>(s) * classes + c];
        if (t >= 0) byte_preds[t].push_back(s);
      }
      for (int32_t i = a_.call_begin_[s]; i < a_.call_begin_[s + 1]; ++i) {
        call_owner[i] = s;
        call_watchers[a_.calls_[i].ret].push_back(i);
        if (a_.calls_[i].start >= 0) call_watchers[a_.calls_[i].start].push_back(i);
      }
    }
    std::vector<bool> live(n, false);
    std::vector<int32_t> todo;
    auto mark = [&](int32_t s) {
      if (!live[s]) live[s] = true, todo.push_back(s);
    };
    for (int32_t s = 0; s < n; ++s) {
      if (a_.flags_[s] & Automaton::kAccepting) mark(s);
    }
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      for (int32_t p : byte_preds[s]) mark(p);
      for (int32_t i : call_watchers[s]) {
        const Call& c = a_.calls_[i];
        if (c.start >= 0 && live[c.start] && live[c.ret]) mark(call_owner[i]);
      }
    }
    if (a_.root_start_ < 0 || !live[a_.root_start_]) {
      return invalid_argument("the grammar admits no string: rule '" + g_.rule_name(g_.root()) +
                              "' can never end (every way through it calls a rule without end)");
    }
    std::vector<Call> kept;
    std::vector<int32_t> begin(n + 1, 0);
    for (int32_t s = 0; s < n; ++s) {
      begin[s] = static_cast<int32_t>(kept.size());
      uint8_t flags = a_.flags_[s] & Automaton::kAccepting;
      for (int32_t c = 0; c < classes; ++c) {
        int32_t& t = a_.trans_[static_cast<size_t>(s) * classes + c];
        if (t >= 0 && !live[t]) t = -1;
        if (t >= 0) flags |= Automaton::kReadsBytes;
      }
      for (int32_t i = a_.call_begin_[s]; i < a_.call_begin_[s + 1]; ++i) {
        const Call& c = a_.calls_[i];
        if (c.start >= 0 && live[c.start] && live[c.ret]) kept.push_back(c), flags |= Automaton::kCalls;
      }
      a_.flags_[s] = live[s] ? flags : 0;
    }
    begin[n] = static_cast<int32_t>(kept.size());
    a_.calls_ = std::move(kept);
    a_.call_begin_ = std::move(begin);
    return {};
  }

  // ends_[s]: state s can end its rule without reading a byte (through calls of rules that can).
  void compute_nullable() {
    const int32_t n = a_.state_count();
    ends_.assign(n, false);
    nullable_.assign(a_.rules_.size(), false);
    std::vector<std::vector<int32_t>> by_ret(n);
    std::vector<std::vector<int32_t>> by_rule(a_.rules_.size());
    std::vector<int32_t> owner(a_.calls_.size());
    for (int32_t s = 0; s < n; ++s) {
      for (int32_t i = a_.call_begin_[s]; i < a_.call_begin_[s + 1]; ++i) {
        owner[i] = s;
        by_ret[a_.calls_[i].ret].push_back(i);
        by_rule[a_.calls_[i].rule].push_back(i);
      }
    }
    std::vector<int32_t> todo;
    auto mark = [&](int32_t s) {
      if (!ends_[s]) ends_[s] = true, todo.push_back(s);
    };
    for (int32_t s = 0; s < n; ++s) {
      if (a_.accepting(s)) mark(s);
    }
    while (!todo.empty()) {
      const int32_t s = todo.back();
      todo.pop_back();
      for (int32_t i : by_ret[s]) {
        if (nullable_[a_.calls_[i].rule]) mark(owner[i]);
      }
      const RuleId r = a_.rule_of_[s];
      if (s == a_.rules_[r].start && !nullable_[r]) {
        nullable_[r] = true;
        for (int32_t i : by_rule[r]) {
          if (ends_[a_.calls_[i].ret]) mark(owner[i]);
        }
      }
    }
  }

  // A rule that can reach a call of itself before reading a byte would stack frames forever.
  Status check_left_recursion() {
    compute_nullable();
    const size_t rules = a_.rules_.size();
    std::vector<std::vector<RuleId>> left_calls(rules);
    std::vector<uint32_t> seen(a_.state_count(), 0);
    uint32_t epoch = 0;
    for (RuleId r = 0; r < static_cast<RuleId>(rules); ++r) {
      if (a_.rules_[r].start < 0) continue;
      ++epoch;
      std::vector<int32_t> todo{a_.rules_[r].start};
      while (!todo.empty()) {
        const int32_t s = todo.back();
        todo.pop_back();
        if (seen[s] == epoch) continue;
        seen[s] = epoch;
        for (const Call& c : a_.calls(s)) {
          left_calls[r].push_back(c.rule);
          if (nullable_[c.rule]) todo.push_back(c.ret);
        }
      }
    }
    std::vector<uint8_t> color(rules, 0);  // 0 new, 1 on the path, 2 done
    for (RuleId s = 0; s < static_cast<RuleId>(rules); ++s) {
      if (color[s]) continue;
      std::vector<std::pair<RuleId, size_t>> work{{s, 0}};
      color[s] = 1;
      while (!work.empty()) {
        auto& [v, i] = work.back();
        if (i < left_calls[v].size()) {
          const RuleId w = left_calls[v][i++];
          if (color[w] == 1) {
            return invalid_argument("rule '" + g_.rule_name(w) +
                                    "' is left-recursive: it can call itself again before reading a byte");
          }
          if (color[w] == 0) color[w] = 1, work.emplace_back(w, 0);
          continue;
        }
        color[v] = 2;
        work.pop_back();
      }
    }
    return {};
  }

  // first[s]: bytes that can be read next from state s, through calls; follow(r) from them.
  void compute_follow() {
    const int32_t n = a_.state_count();
    const int32_t classes = a_.classes_;
    std::vector<ByteSet> first(n);
    std::vector<ByteSet> class_bytes(classes);
    for (int b = 0; b < 256; ++b) class_bytes[a_.class_of_[b]].add(static_cast<uint8_t>(b));
    for (int32_t s = 0; s < n; ++s) {
      for (int32_t c = 0; c < classes; ++c) {
        if (a_.trans_[static_cast<size_t>(s) * classes + c] >= 0) first[s].add_all(class_bytes[c]);
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t s = n - 1; s >= 0; --s) {
        ByteSet f = first[s];
        for (const Call& c : a_.calls(s)) {
          f.add_all(first[c.start]);
          if (nullable_[c.rule]) f.add_all(first[c.ret]);
        }
        if (!(f == first[s])) first[s] = f, changed = true;
      }
    }
    for (bool changed = true; changed;) {
      changed = false;
      for (int32_t s = 0; s < n; ++s) {
        const RuleId caller = a_.rule_of_[s];
        for (const Call& c : a_.calls(s)) {
          ByteSet f = a_.rules_[c.rule].follow;
          f.add_all(first[c.ret]);
          if (ends_[c.ret]) f.add_all(a_.rules_[caller].follow);
          if (!(f == a_.rules_[c.rule].follow)) a_.rules_[c.rule].follow = f, changed = true;
        }
      }
    }
  }

  const Grammar& g_;
  CompileLimits limits_;
  Automaton a_;
  std::vector<ByteSet> sets_;
  std::vector<std::vector<int32_t>> set_classes_;
  std::unordered_map<ExprId, int32_t> set_of_expr_;
  std::unordered_map<ExprId, int64_t> size_memo_;
  std::vector<bool> recursive_, inline_, ends_, nullable_;
  std::vector<int64_t> rule_size_;
  std::vector<RuleId> built_;
  RuleId current_rule_ = -1;
};

Result<Automaton> compile_grammar(const Grammar& grammar, const CompileLimits& limits) {
  return AutomatonBuilder(grammar, limits).build();
}

}  // namespace kiln::grammar
