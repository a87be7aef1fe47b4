// Elementwise kernels over [rows, width] f32 views with strided rows: embedding gather (any float
// table to f32), residual add, silu(a) * b, and the f32 -> bf16/f16 conversion feeding the GEMMs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

struct EmbeddingParams {
  int64_t tokens = 0, width = 0, vocab = 0;
  const int32_t* ids = nullptr;  // [tokens]; an id outside [0, vocab) yields a row of NaN
  const void* table = nullptr; int64_t table_stride = 0;
  DType table_dtype = DType::kF32;
  float* out = nullptr; int64_t out_stride = 0;
};
Status embedding(const EmbeddingParams& p, cudaStream_t stream);

enum class BinaryOp : int { kAdd = 0, kSiluMul = 1 };
struct BinaryParams {
  BinaryOp op = BinaryOp::kAdd;
  int64_t rows = 0, width = 0;
  const float* a = nullptr; int64_t a_stride = 0;
  const float* b = nullptr; int64_t b_stride = 0;
  void* out = nullptr; int64_t out_stride = 0;  // may alias a or b (f32)
  DType out_dtype = DType::kF32;  // or bf16 / f16: the f32 result rounded to nearest even
};
Status binary(const BinaryParams& p, cudaStream_t stream);

// dst[r, c] = round_to_nearest_even(src[r, c]) in bf16 or f16; dst rows are dst_stride apart.
struct ConvertParams {
  int64_t rows = 0, cols = 0;
  const float* src = nullptr; int64_t src_stride = 0;
  void* dst = nullptr; int64_t dst_stride = 0;
  DType dst_dtype = DType::kBF16;
};
Status convert_f32(const ConvertParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
