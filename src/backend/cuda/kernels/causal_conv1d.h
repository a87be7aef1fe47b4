// Depthwise causal conv1d + silu over each row's tokens, continuing from the row's state slot
// (the last K-1 inputs) and leaving the new last K-1 inputs there; kernel widths 2..8. One thread
// per (row, channel, tile of 16 tokens): the conv has no recurrence, so tiles run in parallel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int kConvMaxKernel = 8;

struct CausalConv1dParams {
  int64_t rows = 0, tokens = 0, channels = 0, kernel = 0, slots = 0;
  int64_t max_row_tokens = 0;  // the longest row (sizes the grid)
  Rows<const float> x;
  Rows<const float> weight;  // [channels, kernel]
  float* state = nullptr;  // [slots, kernel - 1, channels], contiguous
  Rows<float> out;
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; slots outside [0, slots) are skipped
};

Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
