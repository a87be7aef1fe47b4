// The matcher: bytes step the stack set; a token mask is the union of the cached entries of the
// current top states, plus the uncertain tokens that survive a walk from the whole stack set.
// Speculative walks make frames in the arena and drop them again.
#include "grammar/matcher.h"

#include <algorithm>

namespace kiln::grammar {

Matcher::Matcher(std::shared_ptr<const Automaton> automaton)
    : automaton_(std::move(automaton)), stepper_(*automaton_, arena_) {
  reset();
}

Matcher::Matcher(std::shared_ptr<const MaskCache> masks)
    : automaton_(masks->automaton_ptr()), masks_(std::move(masks)), stepper_(*automaton_, arena_) {
  reset();
}

void Matcher::reset() {
  arena_.clear();
  stopped_ = false;
  stepper_.enter(FrameArena::kBottom, automaton_->root_start(), state_);
}

bool Matcher::walk(std::string_view bytes, StackSet& out) {
  if (bytes.empty()) {
    out = state_;
    return true;
  }
  if (levels_.size() < 2) levels_.resize(2);
  const StackSet* from = &state_;
  for (size_t i = 0; i < bytes.size(); ++i) {
    StackSet& to = i + 1 == bytes.size() ? out : levels_[i & 1];
    stepper_.step(*from, static_cast<uint8_t>(bytes[i]), to);
    if (to.stacks.empty() && (i + 1 < bytes.size() || !to.ended)) return false;
    from = &to;
  }
  return true;
}

bool Matcher::accepts(std::string_view bytes) {
  if (stopped_) return bytes.empty();
  const size_t mark = arena_.size();
  StackSet out;
  const bool ok = walk(bytes, out);
  arena_.truncate(mark);
  return ok;
}

bool Matcher::advance(std::string_view bytes) {
  if (stopped_) return bytes.empty();
  const size_t mark = arena_.size();
  StackSet out;
  if (!walk(bytes, out)) {
    arena_.truncate(mark);
    return false;
  }
  state_ = std::move(out);
  return true;
}

Status Matcher::accept_token(int32_t id) {
  const TokenVocabulary* vocab = vocabulary();
  if (vocab == nullptr) return failed_precondition("this matcher has no vocabulary: it matches bytes only");
  if (id < 0 || static_cast<size_t>(id) >= vocab->size()) {
    return invalid_argument("token id " + std::to_string(id) + " is outside the vocabulary (size " +
                            std::to_string(vocab->size()) + ")");
  }
  if (stopped_) return invalid_argument("token id " + std::to_string(id) + " comes after the text was stopped");
  if (vocab->is_stop(id)) {
    if (!is_complete()) {
      return invalid_argument("stop token id " + std::to_string(id) + " comes before the grammar's text is complete");
    }
    stopped_ = true;
    return {};
  }
  const std::string_view bytes = vocab->bytes(id);
  if (bytes.empty()) return invalid_argument("token id " + std::to_string(id) + " writes no text a grammar can allow");
  if (!advance(bytes)) return invalid_argument("token id " + std::to_string(id) + " is not allowed by the grammar here");
  return {};
}

Status Matcher::fill_mask(std::span<uint32_t> words) {
  if (!masks_) return failed_precondition("this matcher has no vocabulary: it matches bytes only");
  const TokenVocabulary& vocab = masks_->vocabulary();
  if (words.size() != vocab.mask_words()) {
    return invalid_argument("a token mask of " + std::to_string(words.size()) + " words was given; the vocabulary needs " +
                            std::to_string(vocab.mask_words()));
  }
  tops_.clear();
  if (!stopped_) {
    for (Stack s : state_.stacks) tops_.push_back(stack_state(s));
  }
  std::sort(tops_.begin(), tops_.end());
  tops_.erase(std::unique(tops_.begin(), tops_.end()), tops_.end());
  if (tops_.empty()) std::fill(words.begin(), words.end(), 0u);
  uncertain_.clear();
  for (size_t i = 0; i < tops_.size(); ++i) {
    const StateTokens& entry = masks_->at(tops_[i]);
    if (i == 0) {
      entry.write_to(words, vocab);
    } else {
      entry.add_to(words, vocab, scratch_);
    }
    uncertain_.insert(uncertain_.end(), entry.uncertain.begin(), entry.uncertain.end());
  }
  if (stopped_) return {};
  if (tops_.size() > 1) {
    std::sort(uncertain_.begin(), uncertain_.end());
    uncertain_.erase(std::unique(uncertain_.begin(), uncertain_.end()), uncertain_.end());
  }

  // Uncertain tokens in byte order: each walk starts from the longest prefix it shares with the
  // previous one.
  const size_t mark = arena_.size();
  if (levels_.size() < vocab.max_token_bytes() + 1) levels_.resize(vocab.max_token_bytes() + 1);
  levels_[0] = state_;
  std::string_view prev;
  size_t valid = 0;  // levels_[0..valid] hold the stacks after prev's first bytes
  for (int32_t pos : uncertain_) {
    const int32_t id = vocab.sorted_id(pos);
    if (has_bit(words.data(), id)) continue;
    const std::string_view t = vocab.sorted_bytes(pos);
    size_t common = 0;
    while (common < valid && common < t.size() && prev[common] == t[common]) ++common;
    valid = common;
    while (valid < t.size() && !levels_[valid].stacks.empty()) {
      stepper_.step(levels_[valid], static_cast<uint8_t>(t[valid]), levels_[valid + 1]);
      ++valid;
    }
    prev = t;
    const StackSet& end = levels_[valid];
    if (valid == t.size() && !end.dead()) words[id >> 5] |= 1u << (id & 31);
  }
  arena_.truncate(mark);

  if (state_.ended) {
    for (int32_t id : vocab.stop_ids()) words[id >> 5] |= 1u << (id & 31);
  }
  return {};
}

bool Matcher::mask_is_cached() const {
  if (!masks_ || stopped_) return true;
  for (Stack s : state_.stacks) {
    if (!masks_->has(stack_state(s))) return false;
  }
  return true;
}

Status fill_masks(std::span<Matcher* const> rows, std::span<uint32_t> masks, ThreadPool& pool) {
  if (rows.empty()) return {};
  const TokenVocabulary* vocab = rows[0]->vocabulary();
  if (vocab == nullptr) return failed_precondition("row 0's matcher has no vocabulary");
  const size_t words = vocab->mask_words();
  if (masks.size() != rows.size() * words) {
    return invalid_argument("token masks of " + std::to_string(masks.size()) + " words were given for " +
                            std::to_string(rows.size()) + " rows of " + std::to_string(words) + " words");
  }
  std::vector<Status> status(rows.size());
  std::vector<size_t> cold;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!rows[i]->mask_is_cached()) cold.push_back(i);
  }
  pool.parallel_for(static_cast<int64_t>(cold.size()), 1, [&](int64_t begin, int64_t end, int) {
    for (int64_t k = begin; k < end; ++k) status[cold[k]] = rows[cold[k]]->fill_mask(masks.subspan(cold[k] * words, words));
  });
  for (size_t i = 0, k = 0; i < rows.size(); ++i) {
    if (k < cold.size() && cold[k] == i) {
      ++k;
      continue;
    }
    status[i] = rows[i]->fill_mask(masks.subspan(i * words, words));
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!status[i].ok()) return status[i].with_context("row " + std::to_string(i));
  }
  return {};
}

}  // namespace kiln::grammar
