// Picks the next token of each sequence of a batch from the forward's logits, wherever they live.
// Host logits: every row through its request's Sampler. Device logits (an accelerator): one
// batched argmax on the backend covers every row, and only the ids cross to the host; a row whose
// request needs more than the plain argmax (temperature, penalties, logprobs) has its logits row
// copied to the host and sampled there, exactly as before.
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
// penalties, no logprobs. Such a row needs only its id from the device.
bool needs_only_argmax(const SamplingParams& p);

// The next token of each entry, in order: the reasoning span's closing token where the thinking
// budget is spent, otherwise the row's sample. `device_argmax` false sends every row to the host.
Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_argmax = true);

}  // namespace kiln
