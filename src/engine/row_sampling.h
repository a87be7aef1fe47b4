// Picks the next token of each sequence of a batch from the forward's logits, wherever they live.
// Host logits: every row through its request's Sampler. Device logits (an accelerator): plain
// greedy rows through one batched argmax, rows drawn at temperature > 0 (without top_logprobs)
// through one call of the backend's `sample` with u from the request's own generator; only ids
// and logprobs cross to the host. The rest (top_logprobs, greedy with penalties or logprobs) have
// their logits row copied to the host and sampled there.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "engine/sequence.h"

namespace kiln {

struct RowToSample {
  Sequence* seq = nullptr;
  int64_t row = 0;  // the logits row holding this sequence's next-token distribution
};

// True when the token is the argmax of the raw logits and nothing else is reported: greedy, no
// penalties, no logprobs. Such a row needs only its id from the device; every other row is the
// backend's `sample`'s.
bool needs_only_argmax(const SamplingParams& p);

// The next token of each entry, in order: the reasoning span's closing token where the thinking
// budget is spent, otherwise the row's sample. `device_sampling` false (EngineConfig's switch)
// sends every row to the host.
Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_sampling = true);

}  // namespace kiln
