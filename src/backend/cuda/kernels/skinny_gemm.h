// y[m, n] (+)= x[m, k] w[n, k]^T for decode-sized m (1..64) with bf16 weights, on tensor cores:
// the projections of a decode step with up to 16 rows that the GEMV leaves, where cuBLASLt streams
// the weights at a third to two thirds of the copy bandwidth (skinny_beats_cublaslt says where; it
// takes up to 64). The weights stream from HBM once (16-byte cp.async copies, several steps in
// flight, the first started before the predecessor kernel finishes). Two forms: wgmma (the
// default; x and the weights staged in shared memory and read there by the tensor cores) and
// mma.sync (x fragments loaded by each warp). Either rounds f32 x to bf16 as it loads it, so the
// products are those of cuBLASLt on the rounded x (f32 accumulation). Thin outputs (n of a few
// thousand) split k over a thread-block cluster, whose blocks sum their partial tiles through
// distributed shared memory in a fixed order: the result does not depend on timing (graph replay
// equals eager, bit for bit).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int kSkinnyMaxM = 64;

struct SkinnyGemmParams {
  int64_t m = 0, n = 0, k = 0;
  Rows<const void> x;           // [m, k]
  DType x_dtype = DType::kF32;  // f32 (rounded to bf16 as loaded) or bf16
  const void* w = nullptr;      // [n, k] contiguous
  DType w_dtype = DType::kBF16;  // bf16 only (f16 weights stay on cuBLASLt)
  Rows<float> out;              // [m, n]
  bool accumulate = false;
  bool wgmma = true;  // the wgmma form (the tensor cores read x and the weights from shared memory);
                      // false: the mma.sync form (x fragments loaded by each warp)
  int splits = 0;  // blocks sharing a row tile (a cluster, 1..16); 0: the size whose blocks fill the
                   // device's resident slots best (by the occupancy API)
};

// Whether the kernel takes these arguments: m in 1..64, k a multiple of 128, bf16 weights 16-byte
// aligned, x f32 or bf16 with 16-byte aligned rows.
bool skinny_gemm_applies(const SkinnyGemmParams& p);
// Where the skinny GEMM's wgmma form measured faster than cuBLASLt on an H200 (4B shapes,
// `cuda_kernel_bench gemm` and whole decode steps; docs/decisions.md): up to 16 rows, every projection
// but the LM head. The mma.sync form (an A/B switch) takes the same GEMMs: its own policy
// measured slower than cuBLASLt in whole steps at 16 rows.
bool skinny_beats_cublaslt(int64_t m, int64_t n);
Status skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
