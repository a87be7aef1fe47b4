// f32 products with one side of at most a LoRA rank's width, where cuBLAS tiles poorly (an m =
// 4096, n = 16, k = 2560 sgemm fills a quarter of the H200 and takes ~4x its read time). Both
// read their wide operand once, in f32 FFMA with a fixed summation order (deterministic).
//   shrink: out[m, r] (+)= alpha x[m, k] op(b), op(b) = b^T of b [r, k] (`b_rows`) or b [k, r]:
//     a LoRA u = x A^T, or dY B. A warp takes 4 rows of x, its lanes 4 columns each in turn; the
//     lanes' partial sums meet in a reduce-scatter over shuffles.
//   reduce: out (+)= alpha y^T u, y [m, n] wide, u [m, r]: out [n, r] (a LoRA dB = dY^T u) or,
//     `r_major`, [r, n] (dA = (dY B)^T x). A thread takes a column of y over a split of the rows
//     (the splits fill the device); a second launch sums the splits in order into out.
// Every matrix is row-major with unit column stride and its own row stride (ld).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

constexpr int64_t kThinMaxRank = 64;  // the narrow side's largest width (r)

struct ThinShrinkParams {
  int64_t m = 0, k = 0, r = 0;
  const float* x = nullptr; int64_t ldx = 0;
  const float* b = nullptr; int64_t ldb = 0;
  bool b_rows = false;  // b is [r, k] (op = its transpose); else [k, r]
  float* out = nullptr; int64_t ldo = 0;
  float alpha = 1.f;
  bool accumulate = false;
};

struct ThinReduceParams {
  int64_t m = 0, n = 0, r = 0;
  const float* y = nullptr; int64_t ldy = 0;
  const float* u = nullptr; int64_t ldu = 0;
  float* out = nullptr; int64_t ldo = 0;
  bool r_major = false;  // out is [r, n]; else [n, r]
  float alpha = 1.f;
  bool accumulate = false;
  float* partial = nullptr;  // scratch: thin_reduce_scratch(...) floats
  int splits = 1;            // set by thin_reduce_plan
};

// Whether the shrink takes these operands: 1 <= r <= kThinMaxRank with r % 4 == 0, k % 4 == 0,
// x and b rows 16-byte aligned (four floats a load).
bool thin_shrink_applies(const ThinShrinkParams& p);
Status thin_shrink(const ThinShrinkParams& p, cudaStream_t stream);

// Whether the reduce takes these operands: 1 <= r <= kThinMaxRank. Then thin_reduce_plan sets
// p.splits for a device of `sm_count` multiprocessors, and the scratch holds splits * r * n floats.
bool thin_reduce_applies(const ThinReduceParams& p);
void thin_reduce_plan(ThinReduceParams& p, int sm_count);
inline int64_t thin_reduce_scratch(const ThinReduceParams& p) { return int64_t{p.splits} * p.r * p.n; }
Status thin_reduce(const ThinReduceParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
