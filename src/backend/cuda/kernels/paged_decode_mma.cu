// Decode attention on tensor cores over a bf16 paged cache (paged_attention.h). With g = lane / 4
// and c = lane % 4 (the fragments of mma_bf16.cuh), a warp takes a tile of 16 keys at a time:
//   S^T [16 keys x 8 heads] = K [16 x D] q^T [D x 8]: K's A fragments by ldmatrix from the staged
//     tile; q's B fragments stay in registers for the unit (heads past the group: zeros);
//   the online softmax in f32: a thread holds keys g and g + 8 of heads 2c and 2c + 1, so a
//     head's maximum over the tile is 3 shuffles, and its O^T accumulators are the thread's own;
//   O^T [D x 8] += V^T [D x 16] P^T [16 x 8]: V^T's A fragments by ldmatrix.trans from the staged
//     tile; P^T's B fragments through a small per-warp transpose in shared memory (P rounded to
//     bf16, the sums l kept from f32 p, as flash_prefill.cu does).
// The group's heads are the products' 8 columns, so a tile costs D / 8 mma.sync for any group of
// up to 8 heads, against 2 D FMAs a key and head on the CUDA cores (paged_attention_split.cu).
// The grid is persistent and every warp works alone: warp w of W takes the units (token, KV head,
// split) w, w + W, ..., and streams their tiles, one unit after the other, through kStages
// shared-memory buffers by cp.async, kStages - 1 tiles ahead. So the next unit's first tiles are
// in flight while a unit ends, and no barrier is ever shared: the units' partials merge in
// attention_combine (one split: the unit writes the gated output itself).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/device_target.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_bf16.cuh"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/kernels/paged_keys.cuh"
#include "backend/cuda/kernels/paged_split.cuh"
#include "backend/cuda/kernels/pdl.cuh"

namespace kiln::cuda {

namespace {

constexpr int kTileKeys = 16, kWarps = 4, kThreads = 32 * kWarps;
constexpr int kHeads = 8;           // the products' columns: a group of up to 8 query heads
constexpr int kPT = kTileKeys + 8;  // row stride of the P^T transpose, bf16

template <int D, int kStages>
struct MmaLayout {
  static constexpr int S = D + 8;                    // a staged key row (bf16): 8 rows start 4 banks apart
  static constexpr int kTile = kTileKeys * S;        // K or V of one tile
  static constexpr int kWarp = kStages * 2 * kTile;  // a warp's buffers
  static constexpr size_t kBytes = size_t{kWarps} * kWarp * sizeof(__nv_bfloat16);
};

// A unit of work: token t's keys [k0, k1) (its split) for KV head kvh. Each token's own keys are
// divided into s.splits runs of whole tiles (the last runs may be empty), so that the units of
// equal rows are equal whatever the plan's longest row (a replayed step plans for every length
// its width holds).
struct Unit {
  int64_t t, kvh, split, row, k0, k1;
  int tiles;
};

__device__ __forceinline__ Unit unit_of(const PagedAttentionParams& p, const AttentionSplit& s, int64_t u) {
  Unit x;
  x.split = u % s.splits;
  x.kvh = (u / s.splits) % p.kv_heads;
  x.t = u / (s.splits * p.kv_heads);
  x.row = row_of(p, x.t);
  const int64_t row_begin = p.cu_seqlens[x.row], row_len = p.cu_seqlens[x.row + 1] - row_begin;
  const int64_t keys = p.kv_lens[x.row] - row_len + (x.t - row_begin) + 1;  // keys 0..keys - 1
  const int64_t per = ((keys + kTileKeys - 1) / kTileKeys + s.splits - 1) / s.splits * kTileKeys;
  x.k0 = min(x.split * per, keys);
  x.k1 = min(x.k0 + per, keys);
  x.tiles = static_cast<int>((x.k1 - x.k0 + kTileKeys - 1) / kTileKeys);
  return x;
}

// Grid: (blocks); s.splits units per (token, KV head).
template <int D, int kStages>
__global__ void __launch_bounds__(kThreads, 1) paged_decode_mma_kernel(PagedAttentionParams p, AttentionSplit s) {
  using L = MmaLayout<D, kStages>;
  constexpr int S = L::S, kSteps = D / 16, kChunks = D / 8;  // 16-dim steps; 16-byte pieces of a row
  extern __shared__ float4 smem4[];
  __shared__ int64_t off_s[kWarps][kStages][kTileKeys];  // a key's cache offset, -1: masked
  __shared__ __align__(16) __nv_bfloat16 pt_s[kWarps][kHeads][kPT];
  pdl_begin();
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, c = lane & 3, mi = lane >> 3;
  const int group = static_cast<int>(p.q_heads / p.kv_heads);
  const int64_t workers = static_cast<int64_t>(gridDim.x) * kWarps, first = blockIdx.x * kWarps + warp;
  const int64_t units = p.tokens * p.kv_heads * s.splits;
  const auto* kc = static_cast<const __nv_bfloat16*>(p.k_cache);
  const auto* vc = static_cast<const __nv_bfloat16*>(p.v_cache);
  __nv_bfloat16* mine = reinterpret_cast<__nv_bfloat16*>(smem4) + warp * L::kWarp;
  int64_t(*off)[kTileKeys] = off_s[warp];
  __nv_bfloat16(*pt)[kPT] = pt_s[warp];

  // The producer: the warp's next tile to stage (unit pu, its tile pj), into buffer `staged` %
  // kStages. One group is committed a call, empty past the warp's last tile.
  int64_t pu = first;
  Unit pn = pu < units ? unit_of(p, s, pu) : Unit{};
  int pj = 0, staged = 0;
  auto produce = [&] {
    while (pu < units && pj >= pn.tiles) {
      pu += workers;
      pj = 0;
      if (pu < units) pn = unit_of(p, s, pu);
    }
    if (pu < units) {
      const int b = staged % kStages;
      const int64_t base = pn.k0 + static_cast<int64_t>(kTileKeys) * pj;
      if (lane < kTileKeys) {
        const int64_t j = base + lane;
        const int64_t slot = j < pn.k1 ? PagedKeys(p, pn.row).slot(j) : -1;
        off[b][lane] = slot >= 0 ? (slot * p.kv_heads + pn.kvh) * D : -1;
      }
      __syncwarp();
      __nv_bfloat16* kt = mine + b * 2 * L::kTile;
      __nv_bfloat16* vt = kt + L::kTile;
      for (int e = lane; e < kTileKeys * kChunks; e += 32) {
        const int u = e / kChunks, d = 8 * (e % kChunks);
        const int64_t at = off[b][u];
        const int64_t src = at >= 0 ? at + d : 0;
        __pipeline_memcpy_async(kt + u * S + d, kc + src, 16, at >= 0 ? 0 : 16);
        __pipeline_memcpy_async(vt + u * S + d, vc + src, 16, at >= 0 ? 0 : 16);
      }
      ++pj;
      ++staged;
    }
    __pipeline_commit();
  };

  // Row addresses for ldmatrix: K as A (keys by rows of 8, then dims by 8), V^T as A through
  // .trans (dims by 8, then keys by rows of 8).
  const int k_at = ((lane & 7) + 8 * (mi & 1)) * S + 8 * (mi >> 1);
  const int v_at = ((lane & 7) + 8 * (mi >> 1)) * S + 8 * (mi & 1);
#pragma unroll
  for (int i = 0; i < kStages - 1; ++i) produce();
  int used = 0;  // tiles consumed
  for (int64_t u = first; u < units; u += workers) {
    const Unit n = unit_of(p, s, u);
    // q's B fragments: dims 2c, 2c + 1 and 2c + 8, 2c + 9 of each 16-dim step, head g.
    uint32_t qf[kSteps][2];
    {
      const float* q = p.q.at(n.t, n.kvh * group + (g < group ? g : 0)) + 2 * c;
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        qf[ks][0] = g < group ? pack_bf16(q[16 * ks], q[16 * ks + 1]) : 0u;
        qf[ks][1] = g < group ? pack_bf16(q[16 * ks + 8], q[16 * ks + 9]) : 0u;
      }
    }
    float o[kSteps][4];  // O^T: dims 16 mt + g (+ 8), heads 2c and 2c + 1
#pragma unroll
    for (int mt = 0; mt < kSteps; ++mt) o[mt][0] = o[mt][1] = o[mt][2] = o[mt][3] = 0.f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // heads 2c, 2c + 1; l: this thread's keys

    for (int j = 0; j < n.tiles; ++j, ++used) {
      produce();                           // kStages - 1 tiles ahead, into the buffer the last tile left
      __pipeline_wait_prior(kStages - 1);  // this tile has landed (this lane's copies)
      __syncwarp();                        // and every lane's
      const int b = used % kStages;
      const __nv_bfloat16* kt = mine + b * 2 * L::kTile;
      const __nv_bfloat16* vt = kt + L::kTile;

      float sa[4] = {0.f, 0.f, 0.f, 0.f}, sb[4] = {0.f, 0.f, 0.f, 0.f};  // two chains over the steps
#pragma unroll
      for (int ks = 0; ks < kSteps; ++ks) {
        uint32_t a[4];
        ldmatrix_x4<false>(a, kt + k_at + 16 * ks);
        mma_bf16(ks % 2 == 0 ? sa : sb, a, qf[ks][0], qf[ks][1]);
      }
      const bool ok0 = off[b][g] >= 0, ok1 = off[b][g + 8] >= 0;
      float pr[4];  // (key g, head 2c), (g, 2c + 1), (g + 8, 2c), (g + 8, 2c + 1)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const float x0 = ok0 ? (sa[e] + sb[e]) * p.scale : -INFINITY;
        const float x1 = ok1 ? (sa[e + 2] + sb[e + 2]) * p.scale : -INFINITY;
        float mx = fmaxf(x0, x1);
#pragma unroll
        for (int sh = 4; sh < 32; sh <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, sh));
        const float m_new = fmaxf(m[e], mx);
        const bool none = m_new == -INFINITY;  // no valid key yet: every one so far masked
        const float corr = none ? 1.f : expf(m[e] - m_new);
        pr[e] = none ? 0.f : expf(x0 - m_new);
        pr[e + 2] = none ? 0.f : expf(x1 - m_new);
        l[e] = l[e] * corr + pr[e] + pr[e + 2];
        m[e] = m_new;
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          o[mt][e] *= corr;
          o[mt][e + 2] *= corr;
        }
      }
      pt[2 * c][g] = __float2bfloat16_rn(pr[0]);
      pt[2 * c + 1][g] = __float2bfloat16_rn(pr[1]);
      pt[2 * c][g + 8] = __float2bfloat16_rn(pr[2]);
      pt[2 * c + 1][g + 8] = __float2bfloat16_rn(pr[3]);
      __syncwarp();
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&pt[g][2 * c]);  // keys 2c, 2c + 1 of head g
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&pt[g][2 * c + 8]);
#pragma unroll
      for (int mt = 0; mt < kSteps; ++mt) {
        uint32_t a[4];
        ldmatrix_x4<true>(a, vt + v_at + 16 * mt);
        mma_bf16(o[mt], a, b0, b1);
      }
      __syncwarp();  // the tile's buffers, offsets and P^T are free for reuse
    }

    // The unit's result: the gated output (one split), or its partial.
#pragma unroll
    for (int e = 0; e < 2; ++e) {
#pragma unroll
      for (int sh = 4; sh < 32; sh <<= 1) l[e] += __shfl_xor_sync(0xffffffffu, l[e], sh);
      const int hg = 2 * c + e;
      if (hg >= group) continue;
      const int64_t h = n.kvh * group + hg;
      if (s.splits == 1) {
        const float inv = 1.f / l[e];
        float* out = p.out.at(n.t, h);
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          const int d = 16 * mt + g;
          out[d] = gated(p, n.t, h, d, o[mt][e] * inv);
          out[d + 8] = gated(p, n.t, h, d + 8, o[mt][e + 2] * inv);
        }
      } else {
        const int64_t part = (n.t * p.q_heads + h) * s.splits + n.split;
        float* po = s.part_o + part * D;
#pragma unroll
        for (int mt = 0; mt < kSteps; ++mt) {
          po[16 * mt + g] = o[mt][e];
          po[16 * mt + g + 8] = o[mt][e + 2];
        }
        if (g == 0) {
          s.part_ml[2 * part] = m[e];
          s.part_ml[2 * part + 1] = l[e];
        }
      }
    }
  }
  __pipeline_wait_prior(0);
}

template <int D, int kStages>
void launch(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  constexpr size_t smem = MmaLayout<D, kStages>::kBytes;
  if (Status st = allow_shared_memory(reinterpret_cast<const void*>(paged_decode_mma_kernel<D, kStages>),
                                      static_cast<int64_t>(smem), "paged_decode_mma_kernel");
      !st.ok()) {
    refused_launch() = std::move(st);
    return;
  }
  launch_pdl(paged_decode_mma_kernel<D, kStages>, dim3(static_cast<unsigned>(s.blocks)), kThreads, smem, stream, p, s);
}

// Two stages: a third tied or lost at every shape on every target measured (docs/decisions.md).
constexpr int kMmaStages = 2;

// The shared memory of an instance (head_dim 64, 128 or 256): what the target must hold for it to run.
int64_t shared_bytes(int64_t head_dim) {
  auto of = [&](auto d) -> int64_t {
    constexpr int D = decltype(d)::value;
    return static_cast<int64_t>(MmaLayout<D, kMmaStages>::kBytes);
  };
  if (head_dim == 64) return of(std::integral_constant<int, 64>());
  if (head_dim == 128) return of(std::integral_constant<int, 128>());
  return of(std::integral_constant<int, 256>());
}

template <int D>
void launch(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  launch<D, kMmaStages>(p, s, stream);
}

}  // namespace

bool paged_decode_mma_applies(int64_t head_dim, int64_t group, DType kv_dtype) {
  return kv_dtype == DType::kBF16 && group >= 1 && group <= kHeads &&
         (head_dim == 64 || head_dim == 128 || head_dim == 256) && shared_bytes(head_dim) <= device_target().shared_optin;
}

AttentionSplit plan_decode_mma(int64_t tokens, int64_t kv_heads, int sms, int units_per_warp) {
  AttentionSplit s;
  const int64_t pairs = std::max<int64_t>(tokens * kv_heads, 1), workers = int64_t{kWarps} * std::max(sms, 1);
  s.splits = std::clamp<int64_t>(workers * std::max(units_per_warp, 1) / pairs, 1, kAttentionMaxSplits);
  s.blocks = std::min<int64_t>((tokens * kv_heads * s.splits + kWarps - 1) / kWarps, std::max(sms, 1));
  return s;
}

Status paged_decode_mma(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " q_heads=" +
           std::to_string(p.q_heads) + " kv_heads=" + std::to_string(p.kv_heads) + " head_dim=" +
           std::to_string(p.head_dim) + " splits=" + std::to_string(s.splits) + " blocks=" + std::to_string(s.blocks);
  };
  if (p.tokens == 0) return {};
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0 ||
      !paged_decode_mma_applies(p.head_dim, p.q_heads / p.kv_heads, p.kv_dtype))
    return invalid_argument("paged_decode_mma_kernel: needs a bf16 cache, head_dim 64, 128 or 256 and groups of up "
                            "to 8 heads (" + shape() + ")");
  if (s.prefill_tiles != 0 || s.splits < 1 || s.splits > kAttentionMaxSplits || s.blocks < 1 || s.blocks > 0x7fffffff)
    return invalid_argument("paged_decode_mma_kernel: not a plan of plan_decode_mma (" + shape() + ")");
  if (s.splits > 1 && (s.part_o == nullptr || s.part_ml == nullptr))
    return invalid_argument("paged_decode_mma_kernel: no scratch for the splits (" + shape() + ")");
  switch (p.head_dim) {
    case 64: launch<64>(p, s, stream); break;
    case 128: launch<128>(p, s, stream); break;
    default: launch<256>(p, s, stream); break;
  }
  KILN_RETURN_IF_ERROR(launch_status("paged_decode_mma_kernel", shape, stream));
  return attention_combine(p, s, stream);
}

}  // namespace kiln::cuda
