// A matcher: where one text stands in a compiled grammar. It advances by bytes or by tokens,
// says whether the text is complete, and fills the bitmask of the tokens that may come next.
// One matcher is used by one thread at a time; matchers of a grammar share its automaton and
// token-mask cache.
#pragma once

#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "grammar/automaton.h"
#include "grammar/mask_cache.h"
#include "grammar/stacks.h"

namespace kiln::grammar {

class Matcher {
 public:
  // Bytes only: fill_mask and accept_token need a vocabulary.
  explicit Matcher(std::shared_ptr<const Automaton> automaton);
  explicit Matcher(std::shared_ptr<const MaskCache> masks);
  Matcher(const Matcher&) = delete;  // the stepper holds the arena's address
  Matcher& operator=(const Matcher&) = delete;

  // Whether `bytes` can come next (some string of the grammar continues the text with them).
  // The matcher's position does not change.
  bool accepts(std::string_view bytes);
  // Moves past `bytes`; false, with the position unchanged, when they cannot come next.
  bool advance(std::string_view bytes);
  // Moves past token `id`'s bytes, or stops the text on a stop token. Errors name the token.
  Status accept_token(int32_t id);

  bool is_complete() const { return state_.ended; }        // the text is a whole string of the grammar
  bool can_continue() const { return !state_.stacks.empty(); }  // some byte may still come
  bool is_stopped() const { return stopped_; }             // a stop token was accepted

  // Sets exactly the bits of the ids that may come next (stop ids when the text is complete),
  // over vocabulary().mask_words() words; no bit is set once stopped.
  Status fill_mask(std::span<uint32_t> words);
  // Whether fill_mask needs no cache entry computed first (it takes microseconds, not milliseconds).
  bool mask_is_cached() const;
  const TokenVocabulary* vocabulary() const { return masks_ ? &masks_->vocabulary() : nullptr; }

  void reset();

 private:
  bool walk(std::string_view bytes, StackSet& out);

  std::shared_ptr<const Automaton> automaton_;
  std::shared_ptr<const MaskCache> masks_;
  FrameArena arena_;
  Stepper stepper_;
  StackSet state_;
  bool stopped_ = false;
  // Scratch of fill_mask and walk, kept to avoid allocating per call.
  std::vector<StackSet> levels_;
  std::vector<int32_t> tops_, uncertain_;
  std::vector<uint32_t> scratch_;
};

// fill_mask of every row, row i into masks[i * words, (i + 1) * words) where words is the rows'
// vocabulary's mask_words(): rows whose entries are cached on the calling thread (waking workers
// would cost more), the others spread over `pool`. The first error (naming its row) is returned.
Status fill_masks(std::span<Matcher* const> rows, std::span<uint32_t> masks, ThreadPool& pool);

}  // namespace kiln::grammar
