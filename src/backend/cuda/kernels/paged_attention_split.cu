// The GQA attention kernel for decode and prefill over the paged K/V cache, f32 or bf16 (see
// paged_attention.h). Lanes own head_dim / 32 contiguous dims; a warp walks keys four at a time
// with an online softmax for every query head of its KV head's group, so the group's heads share
// each K/V read and four keys' loads and reductions are in flight together.
//   split-keys mode (decode): block = (token, KV head, key split); its 4 warps take interleaved
//     keys of the split and are merged in shared memory; splits > 1 are merged by a second kernel.
//     Where a key row splits into 8 lanes' 16-byte pieces, lanes go over keys instead of dims
//     (attention_key_groups_kernel) where AttentionSplit::key_groups asks for it.
//   prefill mode: block = (8 consecutive tokens of a row, KV head), a warp per token; tiles of
//     32 keys are staged in shared memory once for the 8 tokens.
#include <cuda_pipeline.h>

#include "backend/cuda/kernels/kv_elem.cuh"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/kernels/paged_keys.cuh"
#include "backend/cuda/kernels/paged_split.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128, kWarps = 4;

// Online-softmax state of one warp for the G heads of a group, over a stream of keys.
template <int DPL, int G, typename KV, int KEYS = 4>
struct WarpAttention {
  static constexpr int kKeys = KEYS;  // keys folded in per step
  float q[G][DPL], acc[G][DPL], m[G], l[G];

  __device__ void init(const PagedAttentionParams& p, int64_t t, int64_t kvh, int lane) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float* src = p.q.at(t, kvh * G + g) + lane * DPL;
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
  __device__ bool fetch(const PagedAttentionParams& p, const PagedKeys& keys, int64_t kvh, int64_t j, int lane,
                        float (&k)[DPL], float (&v)[DPL]) {
    const int64_t slot = keys.slot(j);
    if (slot < 0) {
#pragma unroll
      for (int i = 0; i < DPL; ++i) k[i] = v[i] = 0.f;
      return false;
    }
    const int64_t off = (slot * p.kv_heads + kvh) * p.head_dim + lane * DPL;
    load_kv<DPL>(static_cast<const KV*>(p.k_cache) + off, k);
    load_kv<DPL>(static_cast<const KV*>(p.v_cache) + off, v);
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
  __device__ void run(const PagedAttentionParams& p, const PagedKeys& keys, int64_t kvh, int64_t first, int64_t end,
                      int64_t stride, int lane) {
    for (int64_t j = first; j < end; j += kKeys * stride) {
      float k[kKeys][DPL], v[kKeys][DPL];
      bool ok[kKeys];
#pragma unroll
      for (int u = 0; u < kKeys; ++u) {
        const int64_t jj = j + u * stride;
        if (jj < end) {
          ok[u] = fetch(p, keys, kvh, jj, lane, k[u], v[u]);
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

// The end of a split-keys block: its kWarps warps' online-softmax states (m, l and the
// unnormalised output acc of each query head of the group, a lane owning dims lane * DPL..) are
// merged through shared memory, and the result is the gated output (one split) or the split's
// partial for attention_combine_kernel.
template <int DPL, int G>
struct SplitMerge {
  static constexpr int D = 32 * DPL;
  float m[kWarps][G], l[kWarps][G];
  float o[kWarps][G][D];

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
    for (int e = threadIdx.x; e < G * D; e += kThreads) {
      const int g = e / D, d = e % D;
      float M = -INFINITY;
#pragma unroll
      for (int x = 0; x < kWarps; ++x) M = fmaxf(M, m[x][g]);
      float L = 0.f, O = 0.f;
      if (M != -INFINITY) {
#pragma unroll
        for (int x = 0; x < kWarps; ++x) {
          const float f = m[x][g] == -INFINITY ? 0.f : expf(m[x][g] - M);
          L += l[x][g] * f;
          O += o[x][g][d] * f;
        }
      }
      const int64_t h = kvh * G + g;
      if (s.splits == 1) {
        p.out.at(t, h)[d] = gated(p, t, h, d, O / L);
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

// The keys of token t's split: [k0, k1).
__device__ __forceinline__ void split_keys(const PagedAttentionParams& p, const AttentionSplit& s, int64_t t,
                                           int64_t split, int64_t& row, int64_t& k0, int64_t& k1) {
  row = row_of(p, t);
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t last = p.kv_lens[row] - row_len + (t - row_begin);  // keys 0..last
  k0 = split * s.keys_per_split;
  k1 = k0 + s.keys_per_split < last + 1 ? k0 + s.keys_per_split : last + 1;
}

// Split-keys mode, lanes over dims (the form for shapes key_groups_applies declines). Grid:
// (tokens, kv_heads, splits).
template <int DPL, int G, typename KV>
__global__ void __launch_bounds__(kThreads) attention_split_keys_kernel(PagedAttentionParams p, AttentionSplit s) {
  pdl_begin();
  __shared__ SplitMerge<DPL, G> merge;
  const int64_t t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int64_t row, k0, k1;
  split_keys(p, s, t, split, row, k0, k1);
  WarpAttention<DPL, G, KV> w;
  w.init(p, t, kvh, lane);
  w.run(p, PagedKeys(p, row), kvh, k0 + warp, k1, kWarps, lane);
  merge.store(p, s, t, kvh, split, w.m, w.l, w.acc);
}

// Split-keys mode, lanes over keys (decode): a warp takes tiles of 16 keys (faster than 32 on
// the H200: fewer registers held across a tile). Scoring, 8 lanes share a key (4 keys a step):
// each lane reads 16-byte pieces of its key's K row, so that a load instruction covers 4 whole
// 128-byte lines, dots them with q (staged in shared memory, pre-scaled, read as conflict-free
// broadcasts) and 3 shuffles finish each head's score. The tile's scores then fold into the
// online softmax with one warp max per head, and for P V the lanes own DPL dims each: every
// key's V row is one coalesced load and its probabilities arrive by shuffle. Against the
// lanes-over-dims form this takes the per-key warp reductions (5 shuffles a head) off the
// critical path; loads are issued unconditionally from a clamped address (masked keys then
// weigh exactly 0) so that the unrolled loops keep many in flight.
constexpr int kLanesPerKey = 8, kKeysPerStep = 32 / kLanesPerKey, kKeyTile = 16, kKeySteps = kKeyTile / kKeysPerStep;

template <int DPL, int G, typename KV>
__global__ void __launch_bounds__(kThreads, 4) attention_key_groups_kernel(PagedAttentionParams p, AttentionSplit s) {
  pdl_begin();
  constexpr int D = 32 * DPL, kVec = 16 / static_cast<int>(sizeof(KV)), kChunks = D / (kLanesPerKey * kVec);
  static_assert(kChunks >= 1, "launch's kKeyGroups: a key row covers 8 lanes x 16 bytes");
  // q, pre-scaled, laid out so that the 8 lanes of a key read 8 adjacent float4s (one
  // conflict-free wavefront): float4 (c, part, sub) holds dims (c * 8 + sub) * kVec + 4 * part ...
  constexpr int kParts = kVec / 4;
  __shared__ float4 q_s[G][kChunks][kParts][kLanesPerKey];
  __shared__ int64_t off_s[kWarps][kKeyTile];
  __shared__ SplitMerge<DPL, G> merge;
  const int64_t t = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int sub = lane % kLanesPerKey, grp = lane / kLanesPerKey;
  int64_t row, k0, k1;
  split_keys(p, s, t, split, row, k0, k1);
  for (int e = threadIdx.x; e < G * D; e += kThreads) {
    const int g = e / D, d = e % D, piece = d / kVec, c = piece / kLanesPerKey, part = d % kVec / 4;
    float* q4 = reinterpret_cast<float*>(&q_s[g][c][part][piece % kLanesPerKey]);
    q4[d % 4] = p.q.at(t, kvh * G + g)[d] * p.scale;
  }
  __syncthreads();
  const KV* kc = static_cast<const KV*>(p.k_cache);
  const KV* vc = static_cast<const KV*>(p.v_cache);
  const PagedKeys keys(p, row);

  float acc[G][DPL], m[G], l[G];  // l: this lane's share (lanes with sub == 0 count each key once)
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[g][i] = 0.f;
  }
  for (int64_t base = k0 + warp * kKeyTile; base < k1; base += kWarps * kKeyTile) {
    float sc[kKeySteps][G];
#pragma unroll
    for (int st = 0; st < kKeySteps; ++st) {
      const int64_t j = base + st * kKeysPerStep + grp;
      int64_t off = -1;
      if (j < k1) {
        const int64_t slot = keys.slot(j);
        if (slot >= 0) off = (slot * p.kv_heads + kvh) * D;
      }
      if (sub == 0) off_s[warp][st * kKeysPerStep + grp] = off;
      const KV* kr = kc + (off < 0 ? 0 : off) + sub * kVec;
      float part[G];
#pragma unroll
      for (int g = 0; g < G; ++g) part[g] = 0.f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        float kf[kVec];
        load_kv<kVec>(kr + c * kLanesPerKey * kVec, kf);
#pragma unroll
        for (int g = 0; g < G; ++g)
#pragma unroll
          for (int i = 0; i < kVec; i += 4) {
            const float4 q = q_s[g][c][i / 4][sub];
            part[g] = fmaf(q.x, kf[i], fmaf(q.y, kf[i + 1], fmaf(q.z, kf[i + 2], fmaf(q.w, kf[i + 3], part[g]))));
          }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
#pragma unroll
        for (int o = 1; o < kLanesPerKey; o <<= 1) part[g] += __shfl_xor_sync(0xffffffffu, part[g], o);
        sc[st][g] = off < 0 ? -INFINITY : part[g];
      }
    }
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float mx = sc[0][g];
#pragma unroll
      for (int st = 1; st < kKeySteps; ++st) mx = fmaxf(mx, sc[st][g]);
#pragma unroll
      for (int o = kLanesPerKey; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m[g], mx);  // warp-uniform
      if (m_new == -INFINITY) {             // no valid key yet
#pragma unroll
        for (int st = 0; st < kKeySteps; ++st) sc[st][g] = 0.f;
        continue;
      }
      const float corr = expf(m[g] - m_new);  // 0 while m = -inf
      float psum = 0.f;
#pragma unroll
      for (int st = 0; st < kKeySteps; ++st) {
        sc[st][g] = expf(sc[st][g] - m_new);  // 0 for a masked key
        psum += sc[st][g];
      }
      l[g] = l[g] * corr + (sub == 0 ? psum : 0.f);
#pragma unroll
      for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
      m[g] = m_new;
    }
    __syncwarp();  // off_s of the tile is visible to the warp
#pragma unroll
    for (int u = 0; u < kKeyTile; ++u) {
      const int64_t off = off_s[warp][u];
      float vf[DPL];
      load_kv<DPL>(vc + (off < 0 ? 0 : off) + lane * DPL, vf);
      if (off < 0) {  // warp-uniform; the clamped row's values must not reach acc (0 * NaN)
#pragma unroll
        for (int i = 0; i < DPL; ++i) vf[i] = 0.f;
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float pu = __shfl_sync(0xffffffffu, sc[u / kKeysPerStep][g], (u % kKeysPerStep) * kLanesPerKey);
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] = fmaf(pu, vf[i], acc[g][i]);
      }
    }
    __syncwarp();  // before off_s is rewritten
  }
#pragma unroll
  for (int g = 0; g < G; ++g) l[g] = warp_sum(l[g]);
  merge.store(p, s, t, kvh, split, m, l, acc);
}

// Merges the splits of one (token, query head). Grid: (tokens, q_heads), kCombineThreads a block.
// The weighted sum over the splits is split too: groups of threads take every groups-th split of
// each 4-column slice, so a thread's loads are few and independent (a thread walking all 64
// splits of its columns waited on each load: 16 us at one row, ncu), and the groups' partial sums
// add in group order (deterministic).
constexpr int kCombineThreads = 512;

__global__ void __launch_bounds__(kCombineThreads) attention_combine_kernel(PagedAttentionParams p, AttentionSplit s) {
  pdl_begin();
  __shared__ float f_s[kAttentionMaxSplits];
  __shared__ float4 part_s[kCombineThreads];  // [groups][cols]
  __shared__ float inv_l;
  const int64_t t = blockIdx.x, h = blockIdx.y, D = p.head_dim;
  const int64_t base = (t * p.q_heads + h) * s.splits;
  // The first warp weighs the splits, two a lane, all loaded at once (a loop over the splits in
  // one thread waited for each load in turn: ~0.15 us a split).
  static_assert(kAttentionMaxSplits <= 64, "two splits a lane");
  if (threadIdx.x < 32) {
    const int lane = static_cast<int>(threadIdx.x);
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int64_t x = lane + 32 * i;
      if (x < s.splits) {
        m[i] = s.part_ml[2 * (base + x)];
        l[i] = s.part_ml[2 * (base + x) + 1];
      }
    }
    float M = fmaxf(m[0], m[1]);
    for (int o = 16; o > 0; o >>= 1) M = fmaxf(M, __shfl_xor_sync(0xffffffffu, M, o));
    float L = 0.f;
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const float f = m[i] == -INFINITY ? 0.f : expf(m[i] - M);
      if (lane + 32 * i < s.splits) f_s[lane + 32 * i] = f;
      L += l[i] * f;
    }
    L = warp_sum(L);
    if (lane == 0) inv_l = 1.f / L;
  }
  __syncthreads();
  const int cols = static_cast<int>(D / 4), groups = kCombineThreads / cols;  // D % 4 == 0, cols <= kCombineThreads
  const int c = static_cast<int>(threadIdx.x) % cols, g = static_cast<int>(threadIdx.x) / cols;
  if (g < groups) {
    const float4* src = reinterpret_cast<const float4*>(s.part_o + base * D) + c;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll 4
    for (int64_t x = g; x < s.splits; x += groups) {
      const float4 v = src[x * cols];
      const float f = f_s[x];
      acc.x = fmaf(v.x, f, acc.x);
      acc.y = fmaf(v.y, f, acc.y);
      acc.z = fmaf(v.z, f, acc.z);
      acc.w = fmaf(v.w, f, acc.w);
    }
    part_s[g * cols + c] = acc;
  }
  __syncthreads();
  if (static_cast<int>(threadIdx.x) >= cols) return;
  float4 O = part_s[c];
  for (int j = 1; j < groups; ++j) {
    const float4 q = part_s[j * cols + c];
    O.x += q.x, O.y += q.y, O.z += q.z, O.w += q.w;
  }
  float* out = p.out.at(t, h);
  const int64_t d = 4 * static_cast<int64_t>(c);
  out[d] = gated(p, t, h, d, O.x * inv_l);
  out[d + 1] = gated(p, t, h, d + 1, O.y * inv_l);
  out[d + 2] = gated(p, t, h, d + 2, O.z * inv_l);
  out[d + 3] = gated(p, t, h, d + 3, O.w * inv_l);
}

// Prefill mode. Grid: (ceil(max_q_len / 8), rows, kv_heads * splits). A block takes 8
// consecutive tokens of one row, a warp each, and one split of keys_per_split keys (so that the
// blocks of the last tokens, which see the most keys, do not set the duration alone); tiles of
// 32 keys of K and V are copied into shared memory once for the 8 tokens, and each warp folds the
// tile's keys up to its causal limit into its online softmax. With several splits, each warp
// leaves its partial result for the combine kernel (a split past a token's keys: empty).
constexpr int kTileTokens = 8, kTileKeys = 32;

template <int DPL, int G, typename KV>
__global__ void __launch_bounds__(kTileTokens * 32) attention_prefill_tiled_kernel(PagedAttentionParams p,
                                                                                   AttentionSplit s) {
  pdl_begin();
  constexpr int D = 32 * DPL, kVec = 16 / sizeof(KV), kChunks = D / kVec;  // 16-byte copies
  extern __shared__ float4 smem4[];
  KV* Kt = reinterpret_cast<KV*>(smem4);  // [kTileKeys][D]
  KV* Vt = Kt + kTileKeys * D;            // [kTileKeys][D]
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
  const PagedKeys keys(p, row);

  WarpAttention<DPL, G, KV, 2> w;
  if (active) w.init(p, t, kvh, lane);
  for (int64_t k0 = k_lo; k0 <= block_last; k0 += kTileKeys) {
    __syncthreads();  // every warp is done with the previous tile
    for (int e = threadIdx.x; e < kTileKeys * kChunks; e += blockDim.x) {
      const int jj = e / kChunks, d = kVec * (e % kChunks);
      const int64_t j = k0 + jj;
      const int64_t slot = j <= block_last ? keys.slot(j) : -1;
      const bool ok = slot >= 0;
      if (ok) {
        const int64_t off = (slot * p.kv_heads + kvh) * D + d;
        __pipeline_memcpy_async(Kt + jj * D + d, static_cast<const KV*>(p.k_cache) + off, 16);
        __pipeline_memcpy_async(Vt + jj * D + d, static_cast<const KV*>(p.v_cache) + off, 16);
      } else {
        *reinterpret_cast<uint4*>(Kt + jj * D + d) = make_uint4(0, 0, 0, 0);
        *reinterpret_cast<uint4*>(Vt + jj * D + d) = make_uint4(0, 0, 0, 0);
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
            load_kv<DPL, false>(Kt + jj * D + lane * DPL, k[u]);
            load_kv<DPL, false>(Vt + jj * D + lane * DPL, v[u]);
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
        p.out.at(t, h)[e] = gated(p, t, h, e, w.acc[g][i] * inv);
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

template <int DPL, int G, typename KV>
void launch(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  if (s.prefill_tiles > 0) {
    const size_t smem = 2 * kTileKeys * 32 * DPL * sizeof(KV);
    if (Status st = allow_shared_memory(reinterpret_cast<const void*>(attention_prefill_tiled_kernel<DPL, G, KV>),
                                        static_cast<int64_t>(smem), "attention_prefill_tiled_kernel");
        !st.ok()) {
      refused_launch() = std::move(st);
      return;
    }
    dim3 grid(static_cast<unsigned>(s.prefill_tiles), static_cast<unsigned>(p.rows),
              static_cast<unsigned>(p.kv_heads * s.splits));
    launch_pdl(attention_prefill_tiled_kernel<DPL, G, KV>, grid, kTileTokens * 32, smem, stream, p, s);
  } else {
    dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(s.splits));
    // Lanes over keys where a key row splits into 8 lanes' 16-byte pieces.
    constexpr bool kKeyGroups = 32 * DPL % (kLanesPerKey * 16 / static_cast<int>(sizeof(KV))) == 0;
    if constexpr (kKeyGroups) {
      if (s.key_groups) {
        launch_pdl(attention_key_groups_kernel<DPL, G, KV>, grid, kThreads, 0, stream, p, s);
        return;
      }
    }
    launch_pdl(attention_split_keys_kernel<DPL, G, KV>, grid, kThreads, 0, stream, p, s);
  }
}

template <int DPL, typename KV>
bool launch_group(const PagedAttentionParams& p, const AttentionSplit& s, int64_t group, cudaStream_t stream) {
  switch (group) {
    case 1: launch<DPL, 1, KV>(p, s, stream); return true;
    case 2: if constexpr (2 * DPL <= 32) { launch<DPL, 2, KV>(p, s, stream); return true; } return false;
    case 4: if constexpr (4 * DPL <= 32) { launch<DPL, 4, KV>(p, s, stream); return true; } return false;
    case 8: if constexpr (8 * DPL <= 32) { launch<DPL, 8, KV>(p, s, stream); return true; } return false;
    default: return false;
  }
}

}  // namespace

bool attention_key_groups_apply(int64_t head_dim, DType kv_dtype) {
  // A key row of head_dim elements splits into kLanesPerKey lanes' 16-byte pieces.
  return head_dim % (kLanesPerKey * 16 / static_cast<int64_t>(dtype_size(kv_dtype))) == 0;
}

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
  const bool ok = with_kv_type(p.kv_dtype, [&](auto kv) {
    using KV = kv_t<decltype(kv)>;
    switch (p.head_dim / 32) {
      case 1: return launch_group<1, KV>(p, s, group, stream);
      case 2: return launch_group<2, KV>(p, s, group, stream);
      case 4: return launch_group<4, KV>(p, s, group, stream);
      case 8: return launch_group<8, KV>(p, s, group, stream);
      case 16: return launch_group<16, KV>(p, s, group, stream);
    }
    return false;
  });
  if (!ok) return invalid_argument("attention_split_kernel: no instance for (" + shape() + ")");
  KILN_RETURN_IF_ERROR(launch_status("attention_split_kernel", shape, stream));
  return attention_combine(p, s, stream);
}

Status attention_combine(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  if (s.splits == 1 || p.tokens == 0) return {};
  if (p.head_dim % 4 != 0 || p.head_dim / 4 > kCombineThreads || s.splits > kAttentionMaxSplits)
    return invalid_argument("attention_combine_kernel: head_dim " + std::to_string(p.head_dim) + " or splits " +
                            std::to_string(s.splits) + " out of range");
  dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.q_heads));
  launch_pdl(attention_combine_kernel, grid, kCombineThreads, 0, stream, p, s);
  return launch_status("attention_combine_kernel", [&] {
    return "tokens=" + std::to_string(p.tokens) + " q_heads=" + std::to_string(p.q_heads) + " head_dim=" +
           std::to_string(p.head_dim) + " splits=" + std::to_string(s.splits);
  }, stream);
}

}  // namespace kiln::cuda
