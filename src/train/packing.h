// Packing short SFT examples into sequences of at most a given number of tokens: which examples
// share a sequence (next-fit, in the order given), and the packed TrainSequence itself, whose
// examples the trainer keeps apart (TrainSequence::packed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "train/lora_trainer.h"

namespace kiln {

// The examples `order` names (indices into `lengths`), in that order, cut into consecutive runs
// whose lengths sum to at most `max_tokens`: a run closes when the next example does not fit. An
// example longer than max_tokens gets a run of its own.
std::vector<std::vector<size_t>> pack_in_order(std::span<const size_t> order, std::span<const int64_t> lengths,
                                               int64_t max_tokens);

// The examples as one sequence: tokens and roles one after another, `packed` their lengths (an
// example that is itself packed brings its own). The first token of each example becomes
// kContext: nothing predicts it, so no loss may count it.
TrainSequence pack_sequences(std::span<const TrainSequence* const> examples);

}  // namespace kiln
