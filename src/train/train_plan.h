// The batch plan of a run: which items (SFT sequences, or the GRPO groups kept) are held out for
// the eval loss, and epoch by epoch the optimizer steps, each a list of micro-batches (gradient
// accumulation) of units: one sequence, the sequences packed into one (TrainSpec::pack_tokens),
// or one GRPO group. It depends only on the seed, the items and the settings.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"

namespace kiln {

struct TrainSpec;

struct PlanItem {
  int64_t weight = 1;  // toward TrainSpec::batch_sequences: 1 for a sequence, a group's completions
  int64_t tokens = 0;  // for packing (SFT)
};

struct TrainPlan {
  using Unit = std::vector<size_t>;  // indices into the items: trained as one sequence or one group
  using MicroBatch = std::vector<Unit>;
  std::vector<std::vector<MicroBatch>> steps;  // each optimizer step's micro-batches, in order
  std::vector<MicroBatch> eval;                // the held-out items, in batches as the steps' (no shuffle)
  int64_t held_out = 0;                        // items in `eval`
};

// The items held out by `eval_fraction` of `items`: ceil(fraction * items), 0 when the fraction is 0.
int64_t held_out_items(int64_t items, double eval_fraction);

// The plan of `spec` over `items`. The held-out items are drawn by a seeded Fisher-Yates of their
// own; each epoch then shuffles the rest (mt19937_64 from the seed: the standard fixes its
// output), packs them in that order when packing, and cuts micro-batches of batch_sequences
// (whole units: a GRPO batch holds as many groups as fit, at least one), accumulation_steps
// micro-batches a step (an epoch's last step may have fewer). Refused when the held-out split
// leaves nothing to train on.
Result<TrainPlan> plan_training(std::span<const PlanItem> items, const TrainSpec& spec);

}  // namespace kiln
