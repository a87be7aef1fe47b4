// What the split-keys attention kernels share (paged_attention_split.cu; the tensor-core decode,
// paged_decode_mma.cu, takes the row lookup and the gate, and splits each row's keys itself): a
// block of kSplitWarps warps takes one split of a token's keys for the query heads of one KV head;
// the warps' online-softmax states merge through shared memory into the gated output (one split)
// or the split's partial, which attention_combine merges.
#pragma once

#include <cstdint>

#include "backend/cuda/kernels/paged_attention.h"

namespace kiln::cuda {

constexpr int kSplitThreads = 128, kSplitWarps = 4;

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

// The keys of token t's split: [k0, k1).
__device__ __forceinline__ void split_keys(const PagedAttentionParams& p, const AttentionSplit& s, int64_t t,
                                           int64_t split, int64_t& row, int64_t& k0, int64_t& k1) {
  row = row_of(p, t);
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t last = p.kv_lens[row] - row_len + (t - row_begin);  // keys 0..last
  k0 = split * s.keys_per_split;
  k1 = k0 + s.keys_per_split < last + 1 ? k0 + s.keys_per_split : last + 1;
}

__device__ __forceinline__ float gated(const PagedAttentionParams& p, int64_t t, int64_t h, int64_t e, float o) {
  if (p.gate == nullptr) return o;
  const float g = p.gate[t * p.gate_token_stride + h * p.gate_head_stride + e];
  return o / (1.f + expf(-g));
}

// The end of a split-keys block: its warps' online-softmax states (m, l and the unnormalised
// output acc of each query head of the group, a lane owning dims lane * DPL..) are merged through
// shared memory, and the result is the gated output (one split) or the split's partial for
// attention_combine_kernel.
template <int DPL, int G>
struct SplitMerge {
  static constexpr int D = 32 * DPL;
  float m[kSplitWarps][G], l[kSplitWarps][G];
  float o[kSplitWarps][G][D];

  __device__ void store(const PagedAttentionParams& p, const AttentionSplit& s, int64_t t, int64_t kvh, int64_t split,
                        const float (&wm)[G], const float (&wl)[G], const float (&acc)[G][DPL]) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      if (lane == 0) {
        m[warp][g] = wm[g];
        l[warp][g] = wl[g];
      }
#pragma unroll
      for (int i = 0; i < DPL; ++i) o[warp][g][lane * DPL + i] = acc[g][i];
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * D; e += kSplitThreads) {
      const int g = e / D, d = e % D;
      float M = -INFINITY;
#pragma unroll
      for (int x = 0; x < kSplitWarps; ++x) M = fmaxf(M, m[x][g]);
      float L = 0.f, O = 0.f;
      if (M != -INFINITY) {
#pragma unroll
        for (int x = 0; x < kSplitWarps; ++x) {
          const float f = m[x][g] == -INFINITY ? 0.f : expf(m[x][g] - M);
          L += l[x][g] * f;
          O += o[x][g][d] * f;
        }
      }
      const int64_t h = kvh * G + g;
      if (s.splits == 1) {
        p.out[t * p.out_token_stride + h * p.out_head_stride + d] = gated(p, t, h, d, O / L);
      } else {
        const int64_t part = (t * p.q_heads + h) * s.splits + split;
        s.part_o[part * D + d] = O;
        if (d == 0) {
          s.part_ml[2 * part] = M;
          s.part_ml[2 * part + 1] = L;
        }
      }
    }
  }
};

}  // namespace kiln::cuda
