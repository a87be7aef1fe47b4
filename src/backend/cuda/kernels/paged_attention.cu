#include "backend/cuda/kernels/kv_elem.cuh"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/kernels/paged_keys.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128, kWarps = kThreads / 32;
constexpr int kKeyTile = 64;
constexpr int kPerThread = kAttentionMaxHeadDim / kThreads;  // output dims each thread owns

// Grid: (tokens, q_heads). Block ids outside the cache are skipped (never read). Keys are taken kKeyTile at a time: each warp scores a share of the
// tile (lanes split head_dim), then every thread folds the tile into its output dims with the
// online-softmax rescaling.
template <typename KV>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(PagedAttentionParams p) {
  pdl_begin();
  __shared__ float q_s[kAttentionMaxHeadDim];
  __shared__ float score_s[kKeyTile];
  const int64_t t = blockIdx.x, h = blockIdx.y;
  const int64_t D = p.head_dim, group = p.q_heads / p.kv_heads, kvh = h / group;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;

  // The row owning token t (rows are few: a linear scan is fine), and its causal limit.
  int64_t row = 0;
  while (row + 1 < p.rows && p.cu_seqlens[row + 1] <= t) ++row;
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t kv_len = p.kv_lens[row];
  const int64_t last = kv_len - row_len + (t - row_begin);  // keys 0..last
  const PagedKeys keys(p, row);
  const int64_t kv_row = p.kv_heads * D;

  const float* q = p.q.at(t, h);
  for (int64_t e = threadIdx.x; e < D; e += kThreads) q_s[e] = q[e];
  __syncthreads();

  float acc[kPerThread];
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) acc[i] = 0.f;
  float m = -INFINITY, l = 0.f;

  for (int64_t j0 = 0; j0 <= last; j0 += kKeyTile) {
    const int64_t n = last + 1 - j0 < kKeyTile ? last + 1 - j0 : int64_t{kKeyTile};
    for (int64_t jj = warp; jj < n; jj += kWarps) {
      const int64_t j = j0 + jj;
      const int64_t slot = keys.slot(j);
      if (slot < 0) {
        if (lane == 0) score_s[jj] = -INFINITY;
        continue;
      }
      const KV* k = static_cast<const KV*>(p.k_cache) + slot * kv_row + kvh * D;
      float d = 0.f;
      for (int64_t e = lane; e < D; e += 32) d += q_s[e] * kv_float(k[e]);
      for (int o = 16; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
      if (lane == 0) score_s[jj] = d * p.scale;
    }
    __syncthreads();
    float tile_max = -INFINITY;
    for (int64_t jj = 0; jj < n; ++jj) tile_max = fmaxf(tile_max, score_s[jj]);
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);  // 0 on the first tile (m = -inf)
    l *= correction;
#pragma unroll
    for (int i = 0; i < kPerThread; ++i) acc[i] *= correction;
    for (int64_t jj = 0; jj < n; ++jj) {
      const int64_t j = j0 + jj;
      const int64_t slot = keys.slot(j);
      if (slot < 0) continue;
      const float pj = expf(score_s[jj] - m_new);
      l += pj;
      const KV* v = static_cast<const KV*>(p.v_cache) + slot * kv_row + kvh * D;
#pragma unroll
      for (int i = 0; i < kPerThread; ++i) {
        const int64_t e = threadIdx.x + i * kThreads;
        if (e < D) acc[i] += pj * kv_float(v[e]);
      }
    }
    m = m_new;
    __syncthreads();  // score_s is rewritten by the next tile
  }

  float* o = p.out.at(t, h);
  const float inv = 1.f / l;
  const float* g = p.gate.ptr ? p.gate.at(t, h) : nullptr;
#pragma unroll
  for (int i = 0; i < kPerThread; ++i) {
    const int64_t e = threadIdx.x + i * kThreads;
    if (e < D) o[e] = g ? acc[i] * inv / (1.f + expf(-g[e])) : acc[i] * inv;
  }
}

}  // namespace

Status paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) +
                            " q_heads=" + std::to_string(p.q_heads) + " kv_heads=" + std::to_string(p.kv_heads) +
                            " head_dim=" + std::to_string(p.head_dim) + " block=" + std::to_string(p.block_size); };
  if (p.head_dim > kAttentionMaxHeadDim)
    return invalid_argument("paged_attention_kernel: head_dim above " + std::to_string(kAttentionMaxHeadDim) + " (" +
                            shape() + ")");
  if (p.tokens == 0) return {};
  if (p.q_heads > 65535) return invalid_argument("paged_attention_kernel: more than 65535 heads (" + shape() + ")");
  dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.q_heads));
  with_kv_type(p.kv_dtype, [&](auto kv) { launch_pdl(paged_attention_kernel<kv_t<decltype(kv)>>, grid, kThreads, 0, stream, p); });
  return launch_status("paged_attention_kernel", shape, stream);
}

}  // namespace kiln::cuda
