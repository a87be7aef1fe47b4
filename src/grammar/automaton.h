// A grammar compiled for matching: one deterministic automaton per rule over bytes and calls of
// other rules (a pushdown automaton once frames are stacked), sharing one state numbering and one
// partition of bytes into classes. Immutable once built; shared by every matcher of the grammar.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "grammar/grammar.h"

namespace kiln::grammar {

struct CompileLimits {
  size_t max_nfa_states = 4'000'000;  // after repeats are unrolled and small rules inlined
  size_t max_states = 250'000;        // deterministic states over all rules
};

// A call of rule `rule` from some state: enter at `start`, continue at `ret` once it has ended.
// A tail call (`ret` ends the caller and leads nowhere) replaces the caller's frame.
struct Call {
  RuleId rule = -1;
  int32_t start = -1;
  int32_t ret = -1;
  bool tail = false;
};

class Automaton {
 public:
  int32_t state_count() const { return static_cast<int32_t>(rule_of_.size()); }
  int32_t class_count() const { return classes_; }
  int32_t root_start() const { return root_start_; }

  // The state after byte `b` from `state`, or -1.
  int32_t next(int32_t state, uint8_t b) const { return trans_[static_cast<size_t>(state) * classes_ + class_of_[b]]; }
  bool accepting(int32_t s) const { return flags_[s] & kAccepting; }
  bool reads_bytes(int32_t s) const { return flags_[s] & kReadsBytes; }
  // Neither accepting nor calling: stepping into it needs no expansion.
  bool plain(int32_t s) const { return flags_[s] == kReadsBytes; }
  bool calls_rules(int32_t s) const { return flags_[s] & kCalls; }
  std::span<const Call> calls(int32_t s) const {
    return {calls_.data() + call_begin_[s], calls_.data() + call_begin_[s + 1]};
  }
  RuleId rule_of(int32_t s) const { return rule_of_[s]; }
  const std::string& rule_name(RuleId r) const { return rules_[r].name; }
  // Bytes that can come right after rule `r` ends, over every place it is called from.
  const ByteSet& follow(RuleId r) const { return rules_[r].follow; }
  size_t rule_count() const { return rules_.size(); }

 private:
  friend class AutomatonBuilder;
  static constexpr uint8_t kAccepting = 1, kReadsBytes = 2, kCalls = 4;

  struct RuleInfo {
    std::string name;
    int32_t start = -1;  // -1: inlined into its callers or never reached
    ByteSet follow;
  };

  int32_t classes_ = 0;
  std::array<uint8_t, 256> class_of_{};
  std::vector<int32_t> trans_;  // state * classes_ + class -> state or -1
  std::vector<uint8_t> flags_;
  std::vector<int32_t> call_begin_;
  std::vector<Call> calls_;
  std::vector<RuleId> rule_of_;
  std::vector<RuleInfo> rules_;
  int32_t root_start_ = -1;
};

// Errors (kInvalidArgument) name the rule at fault: a rule without a body, a left-recursive rule
// (it can call itself before reading a byte), a grammar that admits no string, or one past `limits`.
Result<Automaton> compile_grammar(const Grammar& grammar, const CompileLimits& limits = {});

}  // namespace kiln::grammar
