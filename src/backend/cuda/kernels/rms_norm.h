// RMSNorm over rows: (1 + w), plain w, or gated by silu(z); optionally residual += x first and
// the residual normalised. Rows are strided; x may alias out (f32). The output may be bf16 or f16:
// the f32 result rounded to nearest even as it is stored.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

enum class RmsKind : int { kOnePlus = 0, kPlain = 1, kGated = 2 };

struct RmsNormParams {
  RmsKind kind = RmsKind::kOnePlus;
  int64_t rows = 0, width = 0;
  Rows<const float> x;
  Rows<float> residual;  // null: no fused residual
  const float* weight = nullptr;                            // [width]
  Rows<const float> gate;  // kGated
  Rows<void> out;  // elements of out_dtype
  DType out_dtype = DType::kF32;                          // f32, bf16 or f16
  float eps = 1e-6f;
};

Status rms_norm(const RmsNormParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
