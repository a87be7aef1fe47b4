// y[m, n] (+)= x[m, k] w[n, k]^T for small m (1..8) with bf16/f16 weights and f32 x, read
// directly (no rounding of x, no scratch), f32 accumulation: the decode projections. Weights
// stream from HBM once in 16-byte loads (8 values); x comes through L1. Two forms, chosen by
// shape: for m <= 2 and n >= 4096 (or several segments) a warp owns 1, 2 or 4 weight rows and
// strides over k alone; otherwise a block of 256 threads owns 4 rows and strides over k together. The linear facet
// takes it over cuBLASLt where it applies and measured faster (gemv_beats_cublaslt; docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int kGemvMaxM = 8;
constexpr int kGemvMaxSegments = 4;

// One weight of a (grouped) GEMV and its output: out[m, n] (+)= x w[n, k]^T.
struct GemvSegment {
  const void* w = nullptr;  // [n, k] contiguous
  Rows<float> out;
  int64_t n = 0;
};

// One or more weights sharing x (and k, dtype): segments after the first are the projections
// grouped into the same launch (Linear::matmul_group); their rows follow the first's.
struct GemvParams {
  int64_t m = 0, k = 0;
  Rows<const float> x;  // [m, k]
  DType w_dtype = DType::kBF16;
  int segments = 1;
  GemvSegment seg[kGemvMaxSegments];
  bool accumulate = false;
  int multiprocessors = 132;  // sizes the rows a warp takes
  int rows_per_warp = 0;      // 0: by shape; 1, 2 or 4 (4: m <= 2 only): forced; -1: the block-split form
  int64_t rows() const {
    int64_t n = 0;
    for (int s = 0; s < segments; ++s) n += seg[s].n;
    return n;
  }
};

// Whether the kernel takes these arguments: m in 1..8, k a multiple of 8, 16-byte aligned
// weights and x rows (x.stride a multiple of 4 floats), bf16 or f16 weights; several segments
// only for m <= 2 (the warp form).
bool gemv_applies(const GemvParams& p);
// Where the GEMV kernel measured faster than cuBLASLt (x rounded) on an H200, 4B shapes: m <= 2
// always (n up to the 248320-row LM head); m <= 4 for n <= 4096; m <= 8 for n <= 1024.
bool gemv_beats_cublaslt(int64_t m, int64_t n);
Status gemv(const GemvParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
