// The backward of the row-local forward ops, over f32 rows with strided rows: RMSNorm (the three
// kinds of rms_norm.h, frozen weight), silu(a) * b, and the partial rotary embedding (the
// inverse rotation of rope.h, in place).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/rms_norm.h"
#include "core/status.h"

namespace kiln::cuda {

// dx (+)= inv * (g - n * mean(g * n)) with n = x * inv, g = dout * w', w' = 1 + w, w or
// w * silu(gate); kGated also dgate = dout * w * n * silu'(gate). One block per row, which reads
// its whole row before writing any of it: dx may alias dout.
struct NormBackwardParams {
  RmsKind kind = RmsKind::kOnePlus;
  int64_t rows = 0, width = 0;
  const float* x = nullptr; int64_t x_stride = 0;
  const float* weight = nullptr;                          // [width]
  const float* gate = nullptr; int64_t gate_stride = 0;   // kGated
  const float* dout = nullptr; int64_t dout_stride = 0;
  float* dx = nullptr; int64_t dx_stride = 0;
  float* dgate = nullptr; int64_t dgate_stride = 0;       // kGated
  bool accumulate = false;                                // dx += (dgate is always overwritten)
  float eps = 1e-6f;
};
Status norm_backward(const NormBackwardParams& p, cudaStream_t stream);

// da = dout * b * silu'(a), db = dout * silu(a). Each element reads its inputs before writing,
// so an output may alias an input.
struct SiluMulBackwardParams {
  int64_t rows = 0, width = 0;
  const float* a = nullptr; int64_t a_stride = 0;
  const float* b = nullptr; int64_t b_stride = 0;
  const float* dout = nullptr; int64_t dout_stride = 0;
  float* da = nullptr; int64_t da_stride = 0;
  float* db = nullptr; int64_t db_stride = 0;
};
Status silu_mul_backward(const SiluMulBackwardParams& p, cudaStream_t stream);

// dq, dk rotated by -angle in place: the transpose of rope(). Same fields as RopeParams.
struct RopeBackwardParams {
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, rotary_dim = 0;
  float* dq = nullptr; int64_t q_token_stride = 0, q_head_stride = 0;
  float* dk = nullptr; int64_t k_token_stride = 0, k_head_stride = 0;
  const int32_t* positions = nullptr;  // [tokens]
  float theta = 10000.f;
};
Status rope_backward(const RopeBackwardParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
