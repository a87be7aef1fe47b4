// Picks the next token of each sequence of a batch from the forward's logits, wherever they live.
// Host logits: every row through its request's Sampler. Device logits (an accelerator): plain
// greedy rows (constrained ones with their masks, where the backend's argmax takes them) through
// one batched argmax, every other row (drawn, greedy with penalties or
// logprobs, top_logprobs) through one call of the backend's `sample` with u from the request's own
// generator; only ids, logprobs and alternatives cross to the host. A constrained row's mask is
// filled on the host (while the device still runs the forward); its logits are biased, masked
// (disallowed ids to -inf) and go through the Sampler's transforms: in the backend's `sample`,
// the mask going up, where the backend supports constrained requests, else on the host after a
// copy of its logits row.
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

// The allowed-token mask of each row whose constraint is in force (and that is not forced to close
// its reasoning): row i's at masks[mask_of[i] * words], words = (vocab + 31) / 32; mask_of[i] -1
// for the others (a first token that may open the reasoning span also allows that span's opening
// id). Cheap masks are filled on the caller, the others over the default thread pool.
Status fill_constraint_masks(std::span<const RowToSample> rows, int64_t vocab, std::vector<uint32_t>& masks,
                             std::vector<int64_t>& mask_of);

// The next token of each entry, in order: the reasoning span's closing token where the thinking
// budget is spent, otherwise the row's sample. `device_sampling` false (EngineConfig's switch)
// sends every row to the host.
Result<std::vector<SampledToken>> sample_rows(Backend& backend, const Tensor& logits,
                                              std::span<const RowToSample> rows, bool device_sampling = true);

}  // namespace kiln
