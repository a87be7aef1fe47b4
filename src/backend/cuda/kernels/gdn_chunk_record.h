// The record the two-pass chunked form of the gated delta rule keeps per (row, chunk of 64
// tokens, value head) in its scratch: written by gdn_chunked.cu's first pass, read by its scan and
// by the chunked backward (gdn_chunked_backward.cu). Floats, in this order:
//   Qn [64][dk], Kn [64][dk]  the normalised q (times 1/sqrt(dk)) and k; zero rows past the row's end
//   Wk [64][dk]               (I + A)^-1 (beta exp(G) K)
//   U  [64][dv]               (I + A)^-1 (beta V)
//   Mq [64][64]               exp(G_t - G_i) (q_t . k_i), i <= t; zero above the diagonal
//   G  [64]                   the cumulative sum of g inside the chunk (flat past the row's end)
// with A[t, i] = beta_t exp(G_t - G_i) (k_t . k_i), i < t.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#ifdef __CUDACC__
#include <cuda_pipeline.h>
#endif

namespace kiln::cuda {

constexpr int kGdnChunk = 64;

struct GdnChunkRecord {
  int64_t dk, dv;
  __host__ __device__ constexpr int64_t q() const { return 0; }
  __host__ __device__ constexpr int64_t k() const { return kGdnChunk * dk; }
  __host__ __device__ constexpr int64_t wk() const { return 2 * kGdnChunk * dk; }
  __host__ __device__ constexpr int64_t u() const { return 3 * kGdnChunk * dk; }
  __host__ __device__ constexpr int64_t mq() const { return u() + kGdnChunk * dv; }
  __host__ __device__ constexpr int64_t g() const { return mq() + kGdnChunk * kGdnChunk; }
  __host__ __device__ constexpr int64_t floats() const { return g() + kGdnChunk; }
};

// What the two-pass forward keeps for a backward (its records, chunk_states and chunk_w), as one
// block of floats: the records, then the state entering each chunk [item][dk][dv], then W = U -
// Wk S0 [item][64][dv]; item = (row * max_chunks + chunk) * v_heads + value head.
struct GdnForwardKept {
  int64_t records, states, w, total;
};

__host__ __device__ constexpr GdnForwardKept gdn_forward_kept(int64_t rows, int64_t max_chunks, int64_t v_heads,
                                                              int64_t dk, int64_t dv) {
  const int64_t items = rows * max_chunks * v_heads;
  const int64_t states = items * GdnChunkRecord{dk, dv}.floats(), w = states + items * dk * dv;
  return {0, states, w, w + items * kGdnChunk * dv};
}

#ifdef __CUDACC__
// The scans' loads of a record matrix: its kGdnChunk rows of `cols` floats (a multiple of 4) into
// shared memory rows `stride` floats apart (a multiple of 4), 16 bytes a cp.async, the caller
// committing the group. Every thread of the block (THREADS of them) takes part.
template <int THREADS>
__device__ __forceinline__ void load_record_rows(float* dst, int stride, const float* src, int cols) {
  for (int e = threadIdx.x; e < kGdnChunk * (cols / 4); e += THREADS) {
    const int t = e / (cols / 4), d = 4 * (e % (cols / 4));
    __pipeline_memcpy_async(dst + t * stride + d, src + t * cols + d, 16);
  }
}
#endif

}  // namespace kiln::cuda
