// Depthwise causal conv1d + silu over each row's tokens, continuing from the row's state slot
// (the last K-1 inputs) and leaving the new last K-1 inputs there. One thread per (row, channel),
// sequential over the row's tokens; kernel widths 2..8.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

constexpr int kConvMaxKernel = 8;

struct CausalConv1dParams {
  int64_t rows = 0, tokens = 0, channels = 0, kernel = 0, slots = 0;
  const float* x = nullptr; int64_t x_stride = 0;
  const float* weight = nullptr; int64_t weight_stride = 0;  // [channels, kernel]
  float* state = nullptr;  // [slots, kernel - 1, channels], contiguous
  float* out = nullptr; int64_t out_stride = 0;
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; slots outside [0, slots) are skipped
};

Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
