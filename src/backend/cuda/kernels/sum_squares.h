// The sum of the squares of every element of several f32 device tensors, in double: the squared
// global gradient norm of gradient clipping. Each tensor is reduced by kSumSquaresBlocks blocks
// into per-block partial sums, and one block then adds the partials in a fixed order, so the
// result depends on the tensors' sizes alone, never on which block finished first.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>

#include "core/status.h"

namespace kiln::cuda {

constexpr int kSumSquaresBlocks = 64;  // partial sums per tensor

struct SumSquaresInput {
  const float* data = nullptr;
  int64_t n = 0;
};

// Scratch: sum_squares_scratch_bytes(count) device bytes for `count` tensors.
size_t sum_squares_scratch_bytes(size_t count);
// out (device, one double) = sum over the inputs of sum_i x[i]^2.
Status sum_squares(std::span<const SumSquaresInput> inputs, void* scratch, double* out, cudaStream_t stream);

}  // namespace kiln::cuda
