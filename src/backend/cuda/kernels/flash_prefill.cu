// Tensor-core causal GQA attention for prefill (see flash_prefill.h). Fragment layouts are those
// of mma.sync m16n8k16 (row.col, bf16 in, f32 out): with g = lane / 4 and c = lane % 4, a thread
// holds rows g and g + 8 of a 16-row tile and columns 2c, 2c + 1 (+ 8) of each 8-wide slice, so
// the S accumulators of two adjacent 8-key slices are exactly the A operand of P over 16 keys.
// Shared rows are padded by 8 bf16 (16 bytes): consecutive rows then start 4 banks apart, so
// the 8 rows a fragment load touches fall in distinct banks (and ldmatrix stays 16-byte aligned).
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include "backend/cuda/kernels/flash_prefill.h"

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/kv_elem.cuh"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_bf16.cuh"
#include "backend/cuda/kernels/paged_keys.cuh"

namespace kiln::cuda {

namespace {

// A block's tile: kWarps warps of 16 query rows share each staged K/V tile of kTileKeys keys. The
// wide tile, 8 warps over 64-key tiles, is the measured one (4 warps, 2 blocks an SM, ran the
// 4,096-token prefill as fast and staged twice the tiles: 1.6x slower with an f32 cache,
// docs/cuda.md); it needs 198 KB at head_dim 256 (Q, then K and V of two tiles), which sm_90
// alone has. The narrow tile, 4 warps over 32-key tiles, takes 99 KB there: every GPU since sm_80.
constexpr float kLog2e = 1.4426950408889634f;
constexpr int kNarrowRows = 64;  // the narrow tile's query rows: the most blocks a row's grid takes

template <int D>
constexpr int64_t smem_bytes(int query_rows, int tile_keys) {
  return static_cast<int64_t>(query_rows + 4 * tile_keys) * (D + 8) * static_cast<int64_t>(sizeof(__nv_bfloat16));
}

// Grid: (ceil(max_q_len / query rows), rows, q_heads), the query tiles in reverse so that the
// blocks that see the most keys start first. A warp per 16 query rows.
template <int D, typename KV, int kWarps, int kTileKeys>
__global__ void __launch_bounds__(32 * kWarps, 1) flash_prefill_kernel(FlashPrefillParams p) {
  constexpr int kQueryRows = 16 * kWarps, kThreads = 32 * kWarps, kHalves = kTileKeys / 32;
  static_assert(kTileKeys % 32 == 0 && kTileKeys <= kThreads, "a warp looks up 32 keys of a tile");
  constexpr int S = D + 8;  // shared row stride in bf16
  constexpr int kDimSlices = D / 8, kDimSteps = D / 16, kKeySlices = kTileKeys / 8, kQuads = D / 4;
  extern __shared__ float4 smem4[];
  __nv_bfloat16* Qs = reinterpret_cast<__nv_bfloat16*>(smem4);  // [kQueryRows][S]
  __nv_bfloat16* Kbuf = Qs + kQueryRows * S;                     // [2][kTileKeys][S]: tile t in buffer t % 2
  __nv_bfloat16* Vbuf = Kbuf + 2 * kTileKeys * S;                // [2][kTileKeys][S]
  // Per tile, in slot t % 3 (three tiles are live: the one computed, the one staged, the one
  // looked up): each key's K/V offset in the cache (-1: masked), and whether any key of each
  // half of the tile is masked.
  __shared__ int64_t key_off_s[3][kTileKeys];
  __shared__ int tile_holes_s[3][kHalves];

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, c4 = lane & 3;
  const int64_t row = blockIdx.y, h = blockIdx.z, kvh = h / (p.q_heads / p.kv_heads);
  const int64_t row_begin = p.cu_seqlens[row], row_len = p.cu_seqlens[row + 1] - row_begin;
  const int64_t first = static_cast<int64_t>(gridDim.x - 1 - blockIdx.x) * kQueryRows;
  if (first >= row_len) return;  // the whole block: before any barrier
  const int64_t past = p.kv_lens[row] - row_len;
  const int64_t rows_here = row_len - first < kQueryRows ? row_len - first : kQueryRows;
  const int64_t block_last = past + first + rows_here - 1;  // the last key any query of the block sees
  const PagedKeys keys(p, row);

  // Q as bf16 (rows past the row's end: zeros; q may be strided, so element pairs).
  for (int e = tid; e < kQueryRows * (D / 2); e += kThreads) {
    const int r = e / (D / 2), d = 2 * (e % (D / 2));
    float x0 = 0.f, x1 = 0.f;
    if (r < rows_here) {
      const float* src = p.q.at(row_begin + first + r, h) + d;
      x0 = src[0];
      x1 = src[1];
    }
    *reinterpret_cast<uint32_t*>(Qs + r * S + d) = pack_bf16(x0, x1);
  }

  // This thread's rows are r0 + g and r0 + g + 8 of the block; they see keys 0..lim.
  const int r0 = warp * 16;
  const int64_t lim0 = past + first + r0 + g, lim1 = lim0 + 8;
  const int64_t warp_rows = rows_here - r0;  // <= 0: the warp has no query
  const int64_t warp_last = warp_rows <= 0 ? -1 : past + first + r0 + (warp_rows < 16 ? warp_rows : 16) - 1;

  float o[kDimSlices][4];
#pragma unroll
  for (int i = 0; i < kDimSlices; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // m in units of log2, l per thread (columns 2c..)
  const float scale_log2 = p.scale * kLog2e;

  // The tiles' K and V go to shared memory as bf16 (masked keys as zeros) one tile ahead of the
  // arithmetic, into the other buffer: at the top of tile t one barrier says that tile t has
  // landed and that every warp is done with tile t - 1, whose buffers then take tile t + 1. So a
  // tile costs one barrier, and the warps drift apart inside it (one's softmax under another's
  // products). A bf16 cache copies asynchronously (cp.async, one group a tile), an f32 or e4m3
  // one is widened here. The block-table lookup runs two tiles ahead (once a key).
  const int64_t tiles = block_last / kTileKeys + 1;
  auto lookup = [&](int64_t t) {
    if (tid < kTileKeys && t < tiles) {  // whole warps
      const int64_t j = t * kTileKeys + tid;
      const int64_t slot = j <= block_last ? keys.slot(j) : -1;
      key_off_s[t % 3][tid] = slot >= 0 ? (slot * p.kv_heads + kvh) * D : -1;
      const unsigned holes = __ballot_sync(0xffffffffu, slot < 0);
      if (lane == 0) tile_holes_s[t % 3][warp] = holes != 0u;
    }
  };
  auto stage = [&](const void* cache, __nv_bfloat16* dst, int64_t t) {
    if (t < tiles) {
      const int64_t* off = key_off_s[t % 3];
      if constexpr (std::is_same_v<KV, __nv_bfloat16>) {
        for (int e = tid; e < kTileKeys * (D / 8); e += kThreads) {
          const int jj = e / (D / 8), d = 8 * (e % (D / 8));
          const int64_t at = off[jj];
          const KV* src = static_cast<const KV*>(cache) + (at >= 0 ? at + d : 0);
          __pipeline_memcpy_async(dst + jj * S + d, src, 16, at >= 0 ? 0 : 16);  // masked: 16 zero bytes
        }
      } else {  // f32 rounded to bf16; e4m3 widened (exactly: bf16 holds every e4m3 value)
#pragma unroll 4
        for (int e = tid; e < kTileKeys * kQuads; e += kThreads) {
          const int jj = e / kQuads, d = 4 * (e % kQuads);
          const int64_t at = off[jj];
          uint2 b = make_uint2(0, 0);
          if (at >= 0) {
            float x[4];
            load_kv<4>(static_cast<const KV*>(cache) + at + d, x);
            b = make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]));
          }
          *reinterpret_cast<uint2*>(dst + jj * S + d) = b;
        }
      }
    }
  };
  lookup(0);
  lookup(1);
  __syncthreads();  // the offsets (and Q) are in
  stage(p.k_cache, Kbuf, 0);
  stage(p.v_cache, Vbuf, 0);
  __pipeline_commit();

  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t k0 = t * kTileKeys;
    const int64_t* koff = key_off_s[t % 3];
    const bool active = k0 <= warp_last;  // warp-uniform: otherwise every key of the tile is masked for this warp
    __pipeline_wait_prior(0);  // this thread's copies of tile t
    __syncthreads();           // everyone's; and tile t - 1 is consumed
    lookup(t + 2);             // into tile t - 1's slot
    const int nb = static_cast<int>((t + 1) & 1);
    stage(p.k_cache, Kbuf + nb * kTileKeys * S, t + 1);
    stage(p.v_cache, Vbuf + nb * kTileKeys * S, t + 1);
    __pipeline_commit();
    const __nv_bfloat16* Ks = Kbuf + (t & 1) * kTileKeys * S;
    const __nv_bfloat16* Vs = Vbuf + (t & 1) * kTileKeys * S;
    float s[kKeySlices][4];
    if (active) {
      // S = Q K^T for the warp's 16 rows and the tile's keys.
#pragma unroll
      for (int n = 0; n < kKeySlices; ++n) s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f;
      // ldmatrix: Q's A fragment (rows r0 + 0..15, columns kk*16 + 0..15) and K's B fragments
      // of two 8-key slices at once (keys 16np + 0..15, the same columns).
      const __nv_bfloat16* qa = Qs + (r0 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8;
      const __nv_bfloat16* kb = Ks + ((lane & 7) + (lane >> 4) * 8) * S + ((lane >> 3) & 1) * 8;
#pragma unroll
      for (int kk = 0; kk < kDimSteps; ++kk) {
        uint32_t a[4];
        ldmatrix_x4<false>(a, qa + kk * 16);
#pragma unroll
        for (int np = 0; np < kKeySlices / 2; ++np) {
          uint32_t b[4];
          ldmatrix_x4<false>(b, kb + np * 16 * S + kk * 16);
          mma_bf16(s[2 * np], a, b[0], b[1]);
          mma_bf16(s[2 * np + 1], a, b[2], b[3]);
        }
      }
    }
    if (active) {
      // Causal and invalid-block masks, then the online softmax of rows g (hr 0) and g + 8 (hr 1).
      // A tile wholly before the warp's first query, with no masked key, needs no mask (warp-uniform).
      const int64_t rel0 = lim0 - k0, rel1 = lim1 - k0;  // the last visible key of each row, in the tile
      bool masks = k0 + kTileKeys - 1 > lim0 - g;
#pragma unroll
      for (int half = 0; half < kHalves; ++half) masks = masks || tile_holes_s[t % 3][half];
      float mx[2] = {m[0], m[1]};
      if (masks) {
#pragma unroll
        for (int n = 0; n < kKeySlices; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            const int jj = n * 8 + 2 * c4 + (c & 1), hr = c >> 1;
            const bool ok = koff[jj] >= 0 && jj <= (hr ? rel1 : rel0);
            s[n][c] = ok ? s[n][c] * scale_log2 : -INFINITY;
            mx[hr] = fmaxf(mx[hr], s[n][c]);
          }
      } else {
#pragma unroll
        for (int n = 0; n < kKeySlices; ++n)
#pragma unroll
          for (int c = 0; c < 4; ++c) {
            s[n][c] *= scale_log2;
            mx[c >> 1] = fmaxf(mx[c >> 1], s[n][c]);
          }
      }
      float base[2], corr[2], lsum[2] = {0.f, 0.f};
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 1));
        mx[hr] = fmaxf(mx[hr], __shfl_xor_sync(0xffffffffu, mx[hr], 2));
        base[hr] = mx[hr] == -INFINITY ? 0.f : mx[hr];  // no visible key yet: every p is 0
        corr[hr] = exp2f(m[hr] - base[hr]);              // 0 while m = -inf
        m[hr] = mx[hr];
      }
#pragma unroll
      for (int n = 0; n < kKeySlices; ++n)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int hr = c >> 1;
          s[n][c] = exp2f(s[n][c] - base[hr]);
          lsum[hr] += s[n][c];
        }
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) l[hr] = l[hr] * corr[hr] + lsum[hr];
      // Once the running maxima settle, corr is 1 for the whole warp and the rescale is skipped.
      if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
        for (int i = 0; i < kDimSlices; ++i) {
          o[i][0] *= corr[0];
          o[i][1] *= corr[0];
          o[i][2] *= corr[1];
          o[i][3] *= corr[1];
        }
      }
    }
    if (active) {
      // O += P V, P rounded to bf16; V's B operand comes transposed out of its row-major tile.
#pragma unroll
      for (int kc = 0; kc < kTileKeys / 16; ++kc) {
        const uint32_t a[4] = {pack_bf16(s[2 * kc][0], s[2 * kc][1]), pack_bf16(s[2 * kc][2], s[2 * kc][3]),
                               pack_bf16(s[2 * kc + 1][0], s[2 * kc + 1][1]),
                               pack_bf16(s[2 * kc + 1][2], s[2 * kc + 1][3])};
        const __nv_bfloat16* vrow = Vs + (kc * 16 + (lane & 15)) * S + (lane >> 4) * 8;
#pragma unroll
        for (int i = 0; i < kDimSlices; i += 2) {
          uint32_t b[4];
          ldmatrix_x4<true>(b, vrow + i * 8);
          mma_bf16(o[i], a, b[0], b[1]);
          mma_bf16(o[i + 1], a, b[2], b[3]);
        }
      }
    }
  }
  if (warp_last < 0) return;

#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 1);
    l[hr] += __shfl_xor_sync(0xffffffffu, l[hr], 2);
  }
#pragma unroll
  for (int hr = 0; hr < 2; ++hr) {
    const int64_t idx = first + r0 + g + 8 * hr;
    if (idx >= row_len) continue;
    const float inv = l[hr] > 0.f ? 1.f / l[hr] : 0.f;
    const int64_t tok = row_begin + idx;
    if (p.lse != nullptr && c4 == 0) p.lse[tok * p.q_heads + h] = m[hr] + log2f(l[hr]);
    float* dst = p.out.at(tok, h);
    const float* gt = p.gate.ptr != nullptr ? p.gate.at(tok, h) : nullptr;
#pragma unroll
    for (int i = 0; i < kDimSlices; ++i)
#pragma unroll
      for (int c = 0; c < 2; ++c) {
        const int d = i * 8 + 2 * c4 + c;
        float v = o[i][2 * hr + c] * inv;
        if (gt != nullptr) v = v / (1.f + expf(-gt[d]));
        dst[d] = v;
      }
  }
}

template <int D, typename KV, int kWarps, int kTileKeys>
Status launch(const FlashPrefillParams& p, cudaStream_t stream) {
  constexpr int kQueryRows = 16 * kWarps;
  constexpr int64_t smem = smem_bytes<D>(kQueryRows, kTileKeys);
  auto kernel = flash_prefill_kernel<D, KV, kWarps, kTileKeys>;
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(kernel), smem, "flash_prefill_kernel"));
  const dim3 grid(static_cast<unsigned>((p.max_q_len + kQueryRows - 1) / kQueryRows), static_cast<unsigned>(p.rows),
                  static_cast<unsigned>(p.q_heads));
  kernel<<<grid, 32 * kWarps, smem, stream>>>(p);
  return {};
}

template <int D, typename KV>
Status launch(const FlashPrefillParams& p, cudaStream_t stream) {
  if (flash_prefill_wide_tile(D)) return launch<D, KV, 8, 64>(p, stream);
  return launch<D, KV, 4, 32>(p, stream);
}

}  // namespace

bool flash_prefill_supports(int64_t head_dim) {
  if (head_dim != 128 && head_dim != 256) return false;
  return (head_dim == 128 ? smem_bytes<128>(kNarrowRows, 32) : smem_bytes<256>(kNarrowRows, 32)) <=
         device_target().shared_optin;
}

bool flash_prefill_wide_tile(int64_t head_dim) {
  return (head_dim == 128 ? smem_bytes<128>(128, 64) : smem_bytes<256>(128, 64)) <= device_target().shared_optin;
}

Status flash_prefill(const FlashPrefillParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " max_q_len=" +
           std::to_string(p.max_q_len) + " q_heads=" + std::to_string(p.q_heads) + " kv_heads=" +
           std::to_string(p.kv_heads) + " head_dim=" + std::to_string(p.head_dim) + " block_size=" +
           std::to_string(p.block_size);
  };
  if (p.tokens == 0 || p.rows == 0) return {};
  if (!flash_prefill_supports(p.head_dim))
    return invalid_argument("flash_prefill_kernel: head_dim must be 128 or 256 (" + shape() + ")");
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0 || p.block_size <= 0)
    return invalid_argument("flash_prefill_kernel: q_heads must be a multiple of kv_heads, block_size positive (" +
                            shape() + ")");
  if (p.rows > 65535 || p.q_heads > 65535 || p.max_q_len < 1 || (p.max_q_len + kNarrowRows - 1) / kNarrowRows > 0x7fffffff)
    return invalid_argument("flash_prefill_kernel: grid out of range (" + shape() + ")");
  if (reinterpret_cast<uintptr_t>(p.k_cache) % 16 != 0 || reinterpret_cast<uintptr_t>(p.v_cache) % 16 != 0)
    return invalid_argument("flash_prefill_kernel: K/V caches must be 16-byte aligned (" + shape() + ")");
  Status st;
  with_kv_type(p.kv_dtype, [&](auto kv) {
    using KV = kv_t<decltype(kv)>;
    st = p.head_dim == 128 ? launch<128, KV>(p, stream) : launch<256, KV>(p, stream);
  });
  KILN_RETURN_IF_ERROR(st.with_context(shape()));
  return launch_status("flash_prefill_kernel", shape, stream);
}

}  // namespace kiln::cuda
