// Picks the next token of each sequence of a batch from the forward's logits, wherever they live.
// Host logits: every row through its request's Sampler. Device logits (an accelerator): plain
// greedy rows through one batched argmax, rows drawn at temperature > 0 (without top_logprobs)
// through one call of the backend's `sample` with u from the request's own generator; only ids
// and logprobs cross to the host. The rest (top_logprobs, greedy with penalties or logprobs, and
// rows with a token constraint in force or a logit bias) have their logits row copied to the host
// and sampled there. A constrained row's mask is filled on the host, then its logits are biased,
// masked (disallowed ids to -inf) and go through the Sampler's transforms.
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

// logits[id] += bias for each (id, bias); then, where `allowed` (a bitmask over logits.size() ids)
// is given, every id whose bit is clear becomes -inf.
void constrain_logits(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias, const uint32_t* allowed);

// The allowed-token mask of each row whose constraint is in force (and that is not forced to close
// its reasoning): row i's at masks[mask_of[i] * words], words = (vocab + 31) / 32; mask_of[i] -1
// for the others. Cheap masks are filled on the caller, the others over the default thread pool.
Status fill_constraint_masks(std::span<const RowToSample> rows, int64_t vocab, std::vector<uint32_t>& masks,
                             std::vector<int64_t>& mask_of);

// The next token of each entry, in order: the reasoning span's closing token where the thinking
// budget is spent, otherwise the row's sample. `device_sampling` false (EngineConfig's switch)
// sends every row to the host.
Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_sampling = true);

}  // namespace kiln
