// Filling a state's entry: one preorder walk of the vocabulary's trie from the state, with an
// unknown caller below it. A subtree dies with its first byte no stack can read; a token whose
// walk left the state's rule part-way (with a next byte the rule may be followed by) is uncertain.
#include "grammar/mask_cache.h"

#include <algorithm>

#include "grammar/stacks.h"

namespace kiln::grammar {

void StateTokens::write_to(std::span<uint32_t> words, const TokenVocabulary& vocab) const {
  switch (form) {
    case Form::kAcceptedIds:
      std::fill(words.begin(), words.end(), 0u);
      for (int32_t id : ids) words[id >> 5] |= 1u << (id & 31);
      return;
    case Form::kBits:
      std::copy(bits.begin(), bits.end(), words.begin());
      return;
    case Form::kOtherIds:
      std::copy(vocab.writing_ids().begin(), vocab.writing_ids().end(), words.begin());
      for (int32_t id : ids) words[id >> 5] &= ~(1u << (id & 31));
      return;
  }
}

void StateTokens::add_to(std::span<uint32_t> words, const TokenVocabulary& vocab, std::vector<uint32_t>& scratch) const {
  switch (form) {
    case Form::kAcceptedIds:
      for (int32_t id : ids) words[id >> 5] |= 1u << (id & 31);
      return;
    case Form::kBits:
      for (size_t w = 0; w < bits.size(); ++w) words[w] |= bits[w];
      return;
    case Form::kOtherIds:
      scratch = vocab.writing_ids();
      for (int32_t id : ids) scratch[id >> 5] &= ~(1u << (id & 31));
      for (size_t w = 0; w < scratch.size(); ++w) words[w] |= scratch[w];
      return;
  }
}

MaskCache::MaskCache(std::shared_ptr<const Automaton> automaton, std::shared_ptr<const TokenVocabulary> vocab)
    : automaton_(std::move(automaton)),
      vocab_(std::move(vocab)),
      entries_(new std::atomic<const StateTokens*>[static_cast<size_t>(automaton_->state_count())]) {
  for (int32_t s = 0; s < automaton_->state_count(); ++s) entries_[s].store(nullptr, std::memory_order_relaxed);
}

MaskCache::~MaskCache() {
  for (int32_t s = 0; s < automaton_->state_count(); ++s) delete entries_[s].load(std::memory_order_relaxed);
}

const StateTokens& MaskCache::at(int32_t state) const {
  if (const StateTokens* p = entries_[state].load(std::memory_order_acquire)) return *p;
  auto fresh = std::make_unique<StateTokens>(compute(state));
  const StateTokens* expected = nullptr;
  if (entries_[state].compare_exchange_strong(expected, fresh.get(), std::memory_order_acq_rel)) {
    filled_.fetch_add(1, std::memory_order_relaxed);
    return *fresh.release();
  }
  return *expected;  // another thread filled it first
}

void MaskCache::fill_all(ThreadPool& pool) const {
  std::vector<int32_t> states;
  for (int32_t s = 0; s < automaton_->state_count(); ++s) {
    if (automaton_->reads_bytes(s)) states.push_back(s);
  }
  // States differ in cost by orders of magnitude (a string's inside walks the whole trie), so
  // workers take them one at a time.
  std::atomic<size_t> next{0};
  pool.parallel_for(pool.size(), 1, [&](int64_t, int64_t, int) {
    for (size_t i = next.fetch_add(1); i < states.size(); i = next.fetch_add(1)) at(states[i]);
  });
}

StateTokens MaskCache::compute(int32_t state) const {
  const Automaton& a = *automaton_;
  const TokenVocabulary& v = *vocab_;
  const auto& trie = v.trie();
  FrameArena arena;
  Stepper stepper(a, arena);
  // The stacks after each depth of the current trie path: most of a walk has exactly one stack
  // (kept in `one`), the rest a set (in `sets`).
  enum Kind : uint8_t { kDead, kOne, kSet };
  struct Level {
    Stack one = 0;
    Kind kind = kDead;
    bool left = false;   // a stack left the state's rule on this byte
    bool doubt = false;  // a stack left it earlier, before a byte its callers may read
  };
  const size_t depth = v.max_token_bytes() + 1;
  std::vector<Level> levels(depth);
  std::vector<StackSet> sets(depth);
  levels[0].one = make_stack(FrameArena::kContext, state);
  levels[0].kind = kOne;
  const ByteSet& follow = a.follow(a.rule_of(state));
  // Runs of token positions, in increasing order (the trie's preorder is the sorted order).
  std::vector<std::pair<int32_t, int32_t>> accepted, uncertain;
  size_t accepted_count = 0;

  StackSet one_set;
  for (size_t i = 0; i < trie.size();) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const int d = node.depth;
    const Level& from = levels[d - 1];
    Level& here = levels[d];
    here.kind = kDead;
    here.left = false;
    bool stepped_set = false;
    if (from.kind == kOne) {
      const Stack s = from.one;
      const int32_t below = stack_below(s);
      const int32_t next = a.next(stack_state(s), node.byte);
      if (next >= 0) {
        if (!a.calls_rules(next) && (below == FrameArena::kContext || !a.accepting(next))) {
          // No call, and no return except out of the state's rule: the stack just moves.
          here.one = make_stack(below, next);
          here.kind = a.reads_bytes(next) ? kOne : kDead;
          here.left = a.accepting(next);
        } else {
          one_set.stacks.assign(1, s);
          stepper.step(one_set, node.byte, sets[d]);
          stepped_set = true;
        }
      }
    } else if (from.kind == kSet) {
      stepper.step(sets[d - 1], node.byte, sets[d]);
      stepped_set = true;
    }
    if (stepped_set) {
      const StackSet& set = sets[d];
      here.left = set.left;
      if (set.stacks.size() == 1) {
        here.one = set.stacks[0];
        here.kind = kOne;
      } else if (set.stacks.size() > 1) {
        here.kind = kSet;
      }
    }
    // Some stack left the rule before this byte, and the rule's callers may read this byte.
    const bool unsure = from.doubt || (from.left && follow.has(node.byte));
    if (here.kind == kDead && !here.left) {
      if (unsure) uncertain.emplace_back(node.first, node.end);
      i = static_cast<size_t>(node.next);
      continue;
    }
    if (node.ends > 0) {
      accepted.emplace_back(node.first, node.first + node.ends);
      accepted_count += static_cast<size_t>(node.ends);
    }
    here.doubt = unsure;
    ++i;
  }

  StateTokens out;
  out.accepted = static_cast<int32_t>(accepted_count);
  for (const auto& [b, e] : uncertain) {
    for (int32_t pos = b; pos < e; ++pos) out.uncertain.push_back(pos);
  }
  const size_t words = v.mask_words();
  const size_t others = v.token_count() - accepted_count;
  if (accepted_count <= others && accepted_count <= words) {
    out.form = StateTokens::Form::kAcceptedIds;
    out.ids.reserve(accepted_count);
    for (const auto& [b, e] : accepted) {
      for (int32_t pos = b; pos < e; ++pos) out.ids.push_back(v.sorted_id(pos));
    }
    std::sort(out.ids.begin(), out.ids.end());  // so that add_to writes the mask in order
  } else if (others <= words) {
    out.form = StateTokens::Form::kOtherIds;
    out.ids.reserve(others);
    int32_t pos = 0;
    for (const auto& [b, e] : accepted) {
      for (; pos < b; ++pos) out.ids.push_back(v.sorted_id(pos));
      pos = e;
    }
    for (; pos < static_cast<int32_t>(v.token_count()); ++pos) out.ids.push_back(v.sorted_id(pos));
  } else {
    out.form = StateTokens::Form::kBits;
    out.bits.assign(words, 0);
    for (const auto& [b, e] : accepted) {
      for (int32_t pos = b; pos < e; ++pos) set_bit(out.bits, v.sorted_id(pos));
    }
  }
  return out;
}

}  // namespace kiln::grammar
