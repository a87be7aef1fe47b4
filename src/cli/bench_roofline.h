// The work a step of the bench must do at the least, from the model's shape alone: bytes a
// decode step moves, FLOPs a prefill performs. The bench divides them by a rate (measured in the
// same run, or a spec-sheet peak) to get each figure's roofline.
#pragma once

#include <cstdint>

#include "model/config.h"
#include "model/weights.h"

namespace kiln::cli {

// One decode step of `rows` sequences at `context` tokens each: every matmul weight once (the
// LM head included), each row's K/V read over its context (in kv_dtype, as ModelState keeps it),
// and each row's GDN recurrent and conv state read and written once.
double decode_step_bytes(const ModelConfig& c, const ModelWeights& w, DType kv_dtype, int64_t rows, int64_t context);

// A prefill of `tokens` tokens of one sequence whose logits are wanted for the last token only:
// 2 FLOPs per matmul parameter per token (the LM head once), plus causal attention scores and
// the weighted sum of values (2 * T^2 * head_dim per query head per attention layer, half of
// the square). The GDN recurrence (about 1% at the 4B shape) is left out.
double prefill_flops(const ModelConfig& c, const ModelWeights& w, int64_t tokens);

// H200 SXM spec-sheet peaks, the rooflines the CUDA targets are quoted against: HBM3e bandwidth and dense bf16.
inline constexpr double kH200PeakBytesPerS = 4.8e12;
inline constexpr double kH200PeakBf16FlopPerS = 989e12;

}  // namespace kiln::cli
