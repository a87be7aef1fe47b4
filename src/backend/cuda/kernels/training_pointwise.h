// The backward of the row-local forward ops, over f32 rows with strided rows: RMSNorm (the three
// kinds of rms_norm.h, frozen weight), silu(a) * b, and the partial rotary embedding (the
// inverse rotation of rope.h, in place).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/rms_norm.h"
#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

// dx (+)= inv * (g - n * mean(g * n)) with n = x * inv, g = dout * w', w' = 1 + w, w or
// w * silu(gate); kGated also dgate = dout * w * n * silu'(gate). One block per row, which reads
// its whole row before writing any of it: dx may alias dout.
struct NormBackwardParams {
  RmsKind kind = RmsKind::kOnePlus;
  int64_t rows = 0, width = 0;
  Rows<const float> x;
  const float* weight = nullptr;                          // [width]
  Rows<const float> gate;  // kGated
  Rows<const float> dout;
  Rows<float> dx;
  Rows<float> dgate;  // kGated
  bool accumulate = false;                                // dx += (dgate is always overwritten)
  float eps = 1e-6f;
};
Status norm_backward(const NormBackwardParams& p, cudaStream_t stream);

// da = dout * b * silu'(a), db = dout * silu(a). Each element reads its inputs before writing,
// so an output may alias an input.
struct SiluMulBackwardParams {
  int64_t rows = 0, width = 0;
  Rows<const float> a;
  Rows<const float> b;
  Rows<const float> dout;
  Rows<float> da;
  Rows<float> db;
};
Status silu_mul_backward(const SiluMulBackwardParams& p, cudaStream_t stream);

// dq, dk rotated by -angle in place: the transpose of rope(). Same fields as RopeParams.
struct RopeBackwardParams {
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, rotary_dim = 0;
  Heads<float> dq;
  Heads<float> dk;
  const int32_t* positions = nullptr;  // [tokens]
  float theta = 10000.f;
};
Status rope_backward(const RopeBackwardParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
