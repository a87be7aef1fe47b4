// What the paged decode attention kernels share (paged_attention_split.cu on the CUDA cores,
// paged_decode_mma.cu on tensor cores): the row that owns a token, and the output gate.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/paged_attention.h"

namespace kiln::cuda {

// The row owning token t: the last row whose first token is <= t (a binary search over
// cu_seqlens; a decode step of 64 rows would otherwise chain up to 63 dependent loads).
__device__ __forceinline__ int64_t row_of(const PagedAttentionParams& p, int64_t t) {
  int64_t lo = 0, hi = p.rows - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (p.cu_seqlens[mid] <= t) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float gated(const PagedAttentionParams& p, int64_t t, int64_t h, int64_t e, float o) {
  if (p.gate.ptr == nullptr) return o;
  const float g = p.gate.at(t, h)[e];
  return o / (1.f + expf(-g));
}

}  // namespace kiln::cuda
