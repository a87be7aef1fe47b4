// What a grammar allows of a vocabulary at each automaton state, whatever the stack below it:
// the tokens it accepts in every context, and the few whose fate depends on the caller (they leave
// the state's rule before their last byte). Filled on first use of a state, or all at once, and
// shared by every matcher of the grammar; safe to read from several threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core/thread_pool.h"
#include "grammar/automaton.h"
#include "grammar/token_vocabulary.h"

namespace kiln::grammar {

struct StateTokens {
  enum class Form : uint8_t {
    kAcceptedIds,  // ids: the accepted ids
    kOtherIds,     // ids: the writing ids not accepted (accepted: all the others)
    kBits,         // bits: the accepted ids as a mask
  };
  Form form = Form::kAcceptedIds;
  std::vector<int32_t> ids;
  std::vector<uint32_t> bits;
  std::vector<int32_t> uncertain;  // token positions (sorted) to check against the whole stack
  int32_t accepted = 0;

  // Writes the accepted ids as `words` (every other bit cleared).
  void write_to(std::span<uint32_t> words, const TokenVocabulary& vocab) const;
  // ORs the accepted ids into `words`; `scratch` is room for a kOtherIds entry's mask.
  void add_to(std::span<uint32_t> words, const TokenVocabulary& vocab, std::vector<uint32_t>& scratch) const;
};

class MaskCache {
 public:
  MaskCache(std::shared_ptr<const Automaton> automaton, std::shared_ptr<const TokenVocabulary> vocab);
  ~MaskCache();
  MaskCache(const MaskCache&) = delete;
  MaskCache& operator=(const MaskCache&) = delete;

  // The entry of a state that reads bytes; computed by the first caller that needs it.
  const StateTokens& at(int32_t state) const;
  bool has(int32_t state) const { return entries_[state].load(std::memory_order_acquire) != nullptr; }
  // Computes every state's entry now, over `pool`.
  void fill_all(ThreadPool& pool) const;
  size_t filled() const { return filled_.load(std::memory_order_relaxed); }

  const Automaton& automaton() const { return *automaton_; }
  const std::shared_ptr<const Automaton>& automaton_ptr() const { return automaton_; }
  const TokenVocabulary& vocabulary() const { return *vocab_; }

 private:
  StateTokens compute(int32_t state) const;

  std::shared_ptr<const Automaton> automaton_;
  std::shared_ptr<const TokenVocabulary> vocab_;
  std::unique_ptr<std::atomic<const StateTokens*>[]> entries_;
  mutable std::atomic<size_t> filled_{0};
};

}  // namespace kiln::grammar
