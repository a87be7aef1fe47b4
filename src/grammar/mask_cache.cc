// Filling a state's entry: one preorder walk of the vocabulary's trie from the state, with an
// unknown caller below it. A subtree dies with its first byte no stack can read; a token whose
// walk left the state's rule part-way (with a next byte the rule may be followed by) is uncertain.
#include "grammar/mask_cache.h"

#include <algorithm>

#include "grammar/stacks.h"

namespace kiln::grammar {

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
  const size_t depth = v.max_token_bytes() + 1;
  std::vector<StackSet> levels(depth);
  std::vector<uint8_t> left(depth, 0), doubt(depth, 0);
  levels[0].stacks.push_back(make_stack(FrameArena::kContext, state));
  const ByteSet& follow = a.follow(a.rule_of(state));
  // Runs of token positions, in increasing order (the trie's preorder is the sorted order).
  std::vector<std::pair<int32_t, int32_t>> accepted, uncertain;
  size_t accepted_count = 0;

  for (size_t i = 0; i < trie.size();) {
    const TokenVocabulary::TrieNode& node = trie[i];
    const int d = node.depth;
    const StackSet& from = levels[d - 1];
    StackSet& here = levels[d];
    // One stack stepping into a plain state (no call, no return) is most of every walk.
    int32_t next = -1;
    if (from.stacks.size() == 1 && (next = a.next(stack_state(from.stacks[0]), node.byte)) >= 0 && a.plain(next)) {
      here.stacks.resize(1);
      here.stacks[0] = make_stack(stack_below(from.stacks[0]), next);
      here.ended = here.left = false;
    } else {
      stepper.step(from, node.byte, here);
    }
    // Some stack left the rule before this byte, and the rule's callers may read this byte.
    const bool unsure = doubt[d - 1] || (left[d - 1] && follow.has(node.byte));
    if (here.stacks.empty() && !here.left) {
      if (unsure) uncertain.emplace_back(node.first, node.end);
      i = static_cast<size_t>(node.next);
      continue;
    }
    if (node.ends > 0) {
      accepted.emplace_back(node.first, node.first + node.ends);
      accepted_count += static_cast<size_t>(node.ends);
    }
    left[d] = here.left;
    doubt[d] = unsure;
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
