// Greedy selection on the device: per row, the index of the largest logit (the first on ties;
// NaN never wins; a row of NaN yields 0), as the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

struct ArgmaxParams {
  int64_t rows = 0, vocab = 0;
  const float* logits = nullptr; int64_t logits_stride = 0;
  int32_t* ids = nullptr;  // [rows]
};

Status argmax(const ArgmaxParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
