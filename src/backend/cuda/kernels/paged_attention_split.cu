// The GQA attention kernel for decode and prefill over the paged f32 K/V cache (see
// paged_attention.h). Lanes own head_dim / 32 contiguous dims; a warp walks keys four at a time
// with an online softmax for every query head of its KV head's group, so the group's heads share
// each K/V read and four keys' loads and reductions are in flight together.
//   split-keys mode (decode): block = (token, KV head, key split); its 4 warps take interleaved
//     keys of the split and are merged in shared memory; splits > 1 are merged by a second kernel.
//   prefill mode: block = (8 consecutive tokens of a row, KV head), a warp per token; tiles of
//     32 keys are staged in shared memory once for the 8 tokens.
#include <cuda_pipeline.h>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128, kWarps = 4;

template <int DPL>
__device__ __forceinline__ void load_dims(const float* src, float (&dst)[DPL]) {
  if constexpr (DPL % 4 == 0) {
#pragma unroll
    for (int i = 0; i < DPL; i += 4) {
      const float4 v = __ldg(reinterpret_cast<const float4*>(src + i));
      dst[i] = v.x;
      dst[i + 1] = v.y;
      dst[i + 2] = v.z;
      dst[i + 3] = v.w;
    }
  } else if constexpr (DPL == 2) {
    const float2 v = __ldg(reinterpret_cast<const float2*>(src));
    dst[0] = v.x;
    dst[1] = v.y;
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) dst[i] = __ldg(src + i);
  }
}

// The row owning token t (rows are few: a linear scan), its first token and length.
__device__ __forceinline__ int64_t row_of(const PagedAttentionParams& p, int64_t t) {
  int64_t row = 0;
  while (row + 1 < p.rows && p.cu_seqlens[row + 1] <= t) ++row;
  return row;
}

// Online-softmax state of one warp for the G heads of a group, over a stream of keys.
template <int DPL, int G, int KEYS = 4>
struct WarpAttention {
  static constexpr int kKeys = KEYS;  // keys folded in per step
  float q[G][DPL], acc[G][DPL], m[G], l[G];

  __device__ void init(const PagedAttentionParams& p, int64_t t, int64_t kvh, int lane) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float* src = p.q + t * p.q_token_stride + (kvh * G + g) * p.q_head_stride + lane * DPL;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        q[g][i] = src[i];
        acc[g][i] = 0.f;
      }
      m[g] = -INFINITY;
      l[g] = 0.f;
    }
  }

  // Fetches key j's K and V dims of this lane; false (zeros) for a block outside the cache.
  __device__ bool fetch(const PagedAttentionParams& p, const int32_t* table, int64_t kvh, int64_t j, int lane,
                        float (&k)[DPL], float (&v)[DPL]) {
    const int64_t block = table[j / p.block_size];
    if (block < 0 || block >= p.cache_blocks) {
#pragma unroll
      for (int i = 0; i < DPL; ++i) k[i] = v[i] = 0.f;
      return false;
    }
    const int64_t off = ((block * p.block_size + j % p.block_size) * p.kv_heads + kvh) * p.head_dim + lane * DPL;
    load_dims<DPL>(p.k_cache + off, k);
    load_dims<DPL>(p.v_cache + off, v);
    return true;
  }

  // Folds kKeys keys into the online softmax at once: their loads, dot products and warp
  // reductions are independent, and the running sums are rescaled once per group.
  __device__ void step(const float (&k)[kKeys][DPL], const float (&v)[kKeys][DPL], const bool (&ok)[kKeys],
                       float scale) {
    float s[G][kKeys];
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < DPL; ++i) d += q[g][i] * k[u][i];
        s[g][u] = d;
      }
#pragma unroll
    for (int g = 0; g < G; ++g)
#pragma unroll
      for (int u = 0; u < kKeys; ++u) s[g][u] = ok[u] ? warp_sum(s[g][u]) * scale : -INFINITY;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float m_new = m[g];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) m_new = fmaxf(m_new, s[g][u]);
      if (m_new == -INFINITY) continue;  // no valid key yet
      const float corr = expf(m[g] - m_new);  // 0 while m = -inf
      float pu[kKeys], psum = 0.f;
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        pu[u] = expf(s[g][u] - m_new);  // 0 for an invalid key
        psum += pu[u];
      }
      l[g] = l[g] * corr + psum;
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        float a = acc[g][i] * corr;
#pragma unroll
        for (int u = 0; u < kKeys; ++u) a += pu[u] * v[u][i];
        acc[g][i] = a;
      }
      m[g] = m_new;
    }
  }

  // Keys first, first + stride, ... below end, kKeys of them at a time.
  __device__ void run(const PagedAttentionParams& p, const int32_t* table, int64_t kvh, int64_t first, int64_t end,
                      int64_t stride, int lane) {
    for (int64_t j = first; j < end; j += kKeys * stride) {
      float k[kKeys][DPL], v[kKeys][DPL];
      bool ok[kKeys];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const int64_t jj = j + u * stride;
        if (jj < end) {
          ok[u] = fetch(p, table, kvh, jj, lane, k[u], v[u]);
        } else {
          ok[u] = false;
#pragma unroll
          for (int i = 0; i < DPL; ++i) k[u][i] = v[u][i] = 0.f;
        }
      }
      step(k, v, ok, p.scale);
    }
  }
};

__device__ __forceinline__ float gated(const PagedAttentionParams& p, int64_t t, int64_t h, int64_t e, float o) {
  if (p.gate == nullptr) return o;
  const float g = p.gate[t * p.gate_token_stride + h * p.gate_head_stride + e];
  return o / (1.f + expf(-g));
}

// Split-keys mode. Grid: (tokens, kv_heads, splits).
template <int DPL, int G>
__global__ void __launch_bounds__(kThreads) attention_split_keys_kernel(PagedAttentionParams p, AttentionSplit s) {
  pdl_begin();
  constexpr int D = 32 * DPL;
  __shared__ float m_s[kWarps][G], l_s[kWarps][G];
  __shared__ float o_s[kWarps][G][D];
  const int64_t t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = row_of(p, t);
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t last = p.kv_lens[row] - row_len + (t - row_begin);  // keys 0..last
  const int64_t k0 = split * s.keys_per_split;
  const int64_t k1 = k0 + s.keys_per_split < last + 1 ? k0 + s.keys_per_split : last + 1;

  WarpAttention<DPL, G> w;
  w.init(p, t, kvh, lane);
  w.run(p, p.block_tables + row * p.max_blocks, kvh, k0 + warp, k1, kWarps, lane);
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (lane == 0) {
      m_s[warp][g] = w.m[g];
      l_s[warp][g] = w.l[g];
    }
#pragma unroll
    for (int i = 0; i < DPL; ++i) o_s[warp][g][lane * DPL + i] = w.acc[g][i];
  }
  __syncthreads();
  for (int e = threadIdx.x; e < G * D; e += kThreads) {
    const int g = e / D, d = e % D;
    float M = -INFINITY;
#pragma unroll
    for (int x = 0; x < kWarps; ++x) M = fmaxf(M, m_s[x][g]);
    float L = 0.f, O = 0.f;
    if (M != -INFINITY) {
#pragma unroll
      for (int x = 0; x < kWarps; ++x) {
        const float f = m_s[x][g] == -INFINITY ? 0.f : expf(m_s[x][g] - M);
        L += l_s[x][g] * f;
        O += o_s[x][g][d] * f;
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

// Merges the splits of one (token, query head). Grid: (tokens, q_heads).
__global__ void __launch_bounds__(kThreads) attention_combine_kernel(PagedAttentionParams p, AttentionSplit s) {
  pdl_begin();
  __shared__ float f_s[kAttentionMaxSplits];
  __shared__ float inv_l;
  const int64_t t = blockIdx.x, h = blockIdx.y, D = p.head_dim;
  const int64_t base = (t * p.q_heads + h) * s.splits;
  if (threadIdx.x == 0) {
    float M = -INFINITY;
    for (int64_t x = 0; x < s.splits; ++x) M = fmaxf(M, s.part_ml[2 * (base + x)]);
    float L = 0.f;
    for (int64_t x = 0; x < s.splits; ++x) {
      const float m = s.part_ml[2 * (base + x)];
      const float f = m == -INFINITY ? 0.f : expf(m - M);
      f_s[x] = f;
      L += s.part_ml[2 * (base + x) + 1] * f;
    }
    inv_l = 1.f / L;
  }
  __syncthreads();
  for (int64_t d = threadIdx.x; d < D; d += kThreads) {
    float O = 0.f;
    for (int64_t x = 0; x < s.splits; ++x) O += s.part_o[(base + x) * D + d] * f_s[x];
    p.out[t * p.out_token_stride + h * p.out_head_stride + d] = gated(p, t, h, d, O * inv_l);
  }
}

// Prefill mode. Grid: (ceil(max_q_len / 8), rows, kv_heads * splits). A block takes 8
// consecutive tokens of one row, a warp each, and one split of keys_per_split keys (so that the
// blocks of the last tokens, which see the most keys, do not set the duration alone); tiles of
// 32 keys of K and V are copied into shared memory once for the 8 tokens, and each warp folds the
// tile's keys up to its causal limit into its online softmax. With several splits, each warp
// leaves its partial result for the combine kernel (a split past a token's keys: empty).
constexpr int kTileTokens = 8, kTileKeys = 32;

template <int DPL>
__device__ __forceinline__ void load_dims_shared(const float* src, float (&dst)[DPL]) {
  if constexpr (DPL % 4 == 0) {
#pragma unroll
    for (int i = 0; i < DPL; i += 4) {
      const float4 v = *reinterpret_cast<const float4*>(src + i);
      dst[i] = v.x;
      dst[i + 1] = v.y;
      dst[i + 2] = v.z;
      dst[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < DPL; ++i) dst[i] = src[i];
  }
}

template <int DPL, int G>
__global__ void __launch_bounds__(kTileTokens * 32) attention_prefill_tiled_kernel(PagedAttentionParams p,
                                                                                   AttentionSplit s) {
  pdl_begin();
  constexpr int D = 32 * DPL, kQuads = D / 4;
  extern __shared__ float4 smem4[];
  float* Kt = reinterpret_cast<float*>(smem4);  // [kTileKeys][D]
  float* Vt = Kt + kTileKeys * D;               // [kTileKeys][D]
  __shared__ int valid_s[kTileKeys];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.y, kvh = blockIdx.z % p.kv_heads, split = blockIdx.z / p.kv_heads;
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kTileTokens;
  if (first >= row_len) return;
  const int64_t past = p.kv_lens[row] - row_len;
  const int64_t idx = first + warp;
  const bool active = idx < row_len;
  const int64_t t = row_begin + idx, last = past + idx;  // this warp's token sees keys 0..last
  const int64_t k_lo = split * s.keys_per_split;
  int64_t block_last = past + (first + kTileTokens < row_len ? first + kTileTokens : row_len) - 1;
  if (block_last > k_lo + s.keys_per_split - 1) block_last = k_lo + s.keys_per_split - 1;
  const int32_t* table = p.block_tables + row * p.max_blocks;

  WarpAttention<DPL, G, 2> w;
  if (active) w.init(p, t, kvh, lane);
  for (int64_t k0 = k_lo; k0 <= block_last; k0 += kTileKeys) {
    __syncthreads();  // every warp is done with the previous tile
    for (int e = threadIdx.x; e < kTileKeys * kQuads; e += blockDim.x) {
      const int jj = e / kQuads, d = 4 * (e % kQuads);
      const int64_t j = k0 + jj;
      const int64_t block = j <= block_last ? table[j / p.block_size] : -1;
      const bool ok = block >= 0 && block < p.cache_blocks;
      if (ok) {
        const int64_t off = ((block * p.block_size + j % p.block_size) * p.kv_heads + kvh) * D + d;
        __pipeline_memcpy_async(Kt + jj * D + d, p.k_cache + off, 16);
        __pipeline_memcpy_async(Vt + jj * D + d, p.v_cache + off, 16);
      } else {
        *reinterpret_cast<float4*>(Kt + jj * D + d) = make_float4(0.f, 0.f, 0.f, 0.f);
        *reinterpret_cast<float4*>(Vt + jj * D + d) = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      if (d == 0) valid_s[jj] = ok;
    }
    __pipeline_commit();
    __pipeline_wait_prior(0);
    __syncthreads();
    if (active) {
      int64_t end = k0 + kTileKeys < last + 1 ? k0 + kTileKeys : last + 1;
      if (end > block_last + 1) end = block_last + 1;
      for (int64_t j = k0; j < end; j += 2) {
        float k[2][DPL], v[2][DPL];
        bool ok[2];
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int jj = static_cast<int>(j - k0) + u;
          ok[u] = j + u < end && valid_s[jj] != 0;
          if (j + u < end) {
            load_dims_shared<DPL>(Kt + jj * D + lane * DPL, k[u]);
            load_dims_shared<DPL>(Vt + jj * D + lane * DPL, v[u]);
          } else {
#pragma unroll
            for (int i = 0; i < DPL; ++i) k[u][i] = v[u][i] = 0.f;
          }
        }
        w.step(k, v, ok, p.scale);
      }
    }
  }
  if (!active) return;
#pragma unroll
  for (int g = 0; g < G; ++g) {
    const int64_t h = kvh * G + g;
    if (s.splits == 1) {
      const float inv = 1.f / w.l[g];
#pragma unroll
      for (int i = 0; i < DPL; ++i) {
        const int64_t e = lane * DPL + i;
        p.out[t * p.out_token_stride + h * p.out_head_stride + e] = gated(p, t, h, e, w.acc[g][i] * inv);
      }
    } else {
      const int64_t part = (t * p.q_heads + h) * s.splits + split;
#pragma unroll
      for (int i = 0; i < DPL; ++i) s.part_o[part * D + lane * DPL + i] = w.acc[g][i];
      if (lane == 0) {
        s.part_ml[2 * part] = w.m[g];
        s.part_ml[2 * part + 1] = w.l[g];
      }
    }
  }
}

template <int DPL, int G>
void launch(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  if (s.prefill_tiles > 0) {
    const size_t smem = 2 * kTileKeys * 32 * DPL * sizeof(float);
    static const cudaError_t attr = cudaFuncSetAttribute(attention_prefill_tiled_kernel<DPL, G>,
                                                         cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
    (void)attr;  // a failure surfaces as the launch's error
    dim3 grid(static_cast<unsigned>(s.prefill_tiles), static_cast<unsigned>(p.rows),
              static_cast<unsigned>(p.kv_heads * s.splits));
    launch_pdl(attention_prefill_tiled_kernel<DPL, G>, grid, kTileTokens * 32, smem, stream, p, s);
  } else {
    dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(s.splits));
    launch_pdl(attention_split_keys_kernel<DPL, G>, grid, kThreads, 0, stream, p, s);
  }
}

template <int DPL>
bool launch_group(const PagedAttentionParams& p, const AttentionSplit& s, int64_t group, cudaStream_t stream) {
  switch (group) {
    case 1: launch<DPL, 1>(p, s, stream); return true;
    case 2: if constexpr (2 * DPL <= 32) { launch<DPL, 2>(p, s, stream); return true; } return false;
    case 4: if constexpr (4 * DPL <= 32) { launch<DPL, 4>(p, s, stream); return true; } return false;
    case 8: if constexpr (8 * DPL <= 32) { launch<DPL, 8>(p, s, stream); return true; } return false;
    default: return false;
  }
}

}  // namespace

bool paged_attention_split_applies(int64_t head_dim, int64_t group) {
  if (head_dim % 32 != 0) return false;
  const int64_t dpl = head_dim / 32;
  if (dpl != 1 && dpl != 2 && dpl != 4 && dpl != 8 && dpl != 16) return false;
  if (group != 1 && group != 2 && group != 4 && group != 8) return false;
  return group * dpl <= 32;
}

AttentionSplit plan_attention_split(int64_t tokens, int64_t kv_heads, int64_t max_q_len, int64_t max_kv_len, bool decode,
                                    int sms) {
  AttentionSplit s;
  if (max_kv_len < 1) max_kv_len = 1;
  if (!decode) {
    // Splits of 128 keys (more where a row sees more than 64 * 128 keys).
    s.prefill_tiles = (max_q_len + kTileTokens - 1) / kTileTokens;
    int64_t kps = (max_kv_len + kAttentionMaxSplits - 1) / kAttentionMaxSplits;
    kps = (kps + kTileKeys - 1) / kTileKeys * kTileKeys;
    s.keys_per_split = kps < 128 ? 128 : kps;
    s.splits = (max_kv_len + s.keys_per_split - 1) / s.keys_per_split;
    return s;
  }
  const int64_t blocks = tokens * kv_heads;
  int64_t want = blocks >= 2 * sms ? 1 : (2 * sms + blocks - 1) / blocks;
  const int64_t by_len = (max_kv_len + 63) / 64;  // at least 64 keys a split
  if (want > by_len) want = by_len;
  if (want > kAttentionMaxSplits) want = kAttentionMaxSplits;
  if (want < 1) want = 1;
  s.keys_per_split = (max_kv_len + want - 1) / want;
  s.keys_per_split = (s.keys_per_split + kWarps - 1) / kWarps * kWarps;
  s.splits = (max_kv_len + s.keys_per_split - 1) / s.keys_per_split;
  if (s.splits < 1) s.splits = 1;
  return s;
}

Status paged_attention_split(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " q_heads=" +
           std::to_string(p.q_heads) + " kv_heads=" + std::to_string(p.kv_heads) + " head_dim=" +
           std::to_string(p.head_dim) + " splits=" + std::to_string(s.splits) +
           (s.prefill_tiles > 0 ? " prefill_tiles=" + std::to_string(s.prefill_tiles) : std::string());
  };
  if (p.tokens == 0) return {};
  const int64_t group = p.kv_heads > 0 ? p.q_heads / p.kv_heads : 0;
  if (!paged_attention_split_applies(p.head_dim, group) || p.q_heads % p.kv_heads != 0)
    return invalid_argument("attention_split_kernel: unsupported head_dim or group (" + shape() + ")");
  if (p.kv_heads > 65535 || p.q_heads > 65535 || s.splits > kAttentionMaxSplits || p.kv_heads * s.splits > 65535 ||
      p.rows > 65535 || s.prefill_tiles > 0x7fffffff || p.tokens > 0x7fffffff)
    return invalid_argument("attention_split_kernel: grid too large (" + shape() + ")");
  if (s.splits > 1 && (s.part_o == nullptr || s.part_ml == nullptr))
    return invalid_argument("attention_split_kernel: no scratch for the splits (" + shape() + ")");
  bool ok = false;
  switch (p.head_dim / 32) {
    case 1: ok = launch_group<1>(p, s, group, stream); break;
    case 2: ok = launch_group<2>(p, s, group, stream); break;
    case 4: ok = launch_group<4>(p, s, group, stream); break;
    case 8: ok = launch_group<8>(p, s, group, stream); break;
    case 16: ok = launch_group<16>(p, s, group, stream); break;
  }
  if (!ok) return invalid_argument("attention_split_kernel: no instance for (" + shape() + ")");
  KILN_RETURN_IF_ERROR(launch_status("attention_split_kernel", shape, stream));
  if (s.splits == 1) return {};
  dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.q_heads));
  launch_pdl(attention_combine_kernel, grid, kThreads, 0, stream, p, s);
  return launch_status("attention_combine_kernel", shape, stream);
}

}  // namespace kiln::cuda
