// Elementwise kernels over [rows, width] f32 views with strided rows: embedding gather (any float
// table to f32), every binary op of backend/elementwise_ops.h, and the f32 -> bf16/f16 conversion
// feeding the GEMMs.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "backend/elementwise_ops.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

struct EmbeddingParams {
  int64_t tokens = 0, width = 0, vocab = 0;
  const int32_t* ids = nullptr;  // [tokens]; an id outside [0, vocab) yields a row of NaN
  Rows<const void> table;
  DType table_dtype = DType::kF32;
  Rows<float> out;
};
Status embedding(const EmbeddingParams& p, cudaStream_t stream);

struct BinaryParams {
  ElementwiseOp op = ElementwiseOp::kAdd;
  int64_t rows = 0, width = 0;
  Rows<const float> a, b;
  Rows<void> out;                 // may alias a or b (f32)
  DType out_dtype = DType::kF32;  // or bf16 / f16 where the op's out16 says so: the f32 result rounded to nearest even
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
