// The backward of the depthwise causal conv1d + silu of causal_conv1d.h from a zero state per row
// (training rows start at position 0): dx from the gradient of the silu output, the weight
// frozen. Kernel widths 1..kConvMaxKernel. One thread per (row, channel, tile of 16 inputs): it
// recomputes the pre-activations its tile's inputs feed (the tile and K-1 tokens after it), so
// tiles are independent.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/causal_conv1d.h"
#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

struct ConvBackwardParams {
  int64_t rows = 0, tokens = 0, channels = 0, kernel = 0;
  int64_t max_row_tokens = 0;  // the longest row (sizes the grid; tiles beyond it loop)
  Rows<const float> x;
  Rows<const float> weight;  // [channels, kernel]
  Rows<const float> dout;
  Rows<float> dx;
  const int32_t* cu_seqlens = nullptr;  // [rows + 1]; clamped to [0, tokens] on the device
};

Status conv_backward(const ConvBackwardParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
