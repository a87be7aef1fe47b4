// Tensor-core causal GQA attention backward (see flash_backward.h). Fragment layouts are those of
// mma.sync m16n8k16 (mma_bf16.cuh). Tiles are 64 keys or 64 queries of one head, bf16 rows padded
// by 8 elements in shared memory (consecutive rows 16 bytes of banks apart: ldmatrix without
// conflicts), copied in by cp.async one tile ahead of the arithmetic. A tile pair costs two
// barriers: one for the landed tile (and every warp done with the previous pair), one between the
// probabilities written to shared memory and their products.
#include <cuda_bf16.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "backend/cuda/kernels/flash_backward.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_bf16.cuh"

namespace kiln::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kTile = 64;                // keys or queries of a tile
constexpr int kWarps = 8, kThreads = 32 * kWarps;
constexpr int kSP = kTile + 8;           // shared row stride of a P or dS tile, in bf16
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr int kTileElems = kTile * (D + 8);  // bf16 elements of a padded [64, D] tile

// V consecutive floats (V = 4: one 16-byte access, the caller has checked the alignment).
template <int V>
__device__ __forceinline__ void load(const float* s, float (&x)[V]) {
  if constexpr (V == 4) {
    const float4 v = *reinterpret_cast<const float4*>(s);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    x[0] = s[0];
  }
}
template <int V>
__device__ __forceinline__ void store(float* d, const float (&x)[V]) {
  if constexpr (V == 4) *reinterpret_cast<float4*>(d) = make_float4(x[0], x[1], x[2], x[3]);
  else d[0] = x[0];
}
template <int V>
__device__ __forceinline__ void store_bf16(bf16* d, const float (&x)[V]) {
  if constexpr (V == 4) *reinterpret_cast<uint2*>(d) = make_uint2(pack_bf16(x[0], x[1]), pack_bf16(x[2], x[3]));
  else d[0] = __float2bfloat16_rn(x[0]);
}

// ---- prep: one warp per (token, head slot); slots [0, q_heads) are query heads, the rest kv
// heads. V floats an access (4 where every view's rows and heads start 16-byte aligned).
template <int V>
__global__ void flash_backward_prep_kernel(FlashBackwardParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t slots = p.q_heads + p.kv_heads;
  const int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (item >= p.tokens * slots) return;
  const int64_t t = item / slots, s = item % slots, D = p.head_dim;
  if (s < p.q_heads) {
    const float* q = p.q.at(t, s);
    const float* y = p.out.at(t, s);
    const float* dy = p.dout.at(t, s);
    const float* gt = p.gate.ptr != nullptr ? p.gate.at(t, s) : nullptr;
    float* dg = p.gate.ptr != nullptr ? p.dgate.at(t, s) : nullptr;
    bf16* qo = static_cast<bf16*>(p.qb) + (t * p.q_heads + s) * D;
    bf16* doo = static_cast<bf16*>(p.dob) + (t * p.q_heads + s) * D;
    float di = 0.f;
    for (int64_t e = V * lane; e < D; e += 32 * V) {
      float qv[V], yv[V], dyv[V], dov[V], gv[V], dgv[V];
      load<V>(q + e, qv);
      load<V>(y + e, yv);
      load<V>(dy + e, dyv);
      if (gt != nullptr) load<V>(gt + e, gv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        di += dyv[i] * yv[i];  // dO O = dY sigmoid(g) O = dY Y
        dov[i] = dyv[i];
        if (gt != nullptr) {
          const float sg = 1.f / (1.f + expf(-gv[i]));
          dov[i] = dyv[i] * sg;
          dgv[i] = dyv[i] * yv[i] * (1.f - sg);  // dY O sigmoid'(g) = dY Y (1 - sigmoid(g))
        }
      }
      if (gt != nullptr) store<V>(dg + e, dgv);
      store_bf16<V>(qo + e, qv);
      store_bf16<V>(doo + e, dov);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) di += __shfl_xor_sync(0xffffffffu, di, o);
    if (lane == 0) p.di[t * p.q_heads + s] = di;
  } else {
    const int64_t h = s - p.q_heads;
    const float* k = p.k.at(t, h);
    const float* v = p.v.at(t, h);
    bf16* ko = static_cast<bf16*>(p.kb) + (t * p.kv_heads + h) * D;
    bf16* vo = static_cast<bf16*>(p.vb) + (t * p.kv_heads + h) * D;
    for (int64_t e = V * lane; e < D; e += 32 * V) {
      float kv[V], vv[V];
      load<V>(k + e, kv);
      load<V>(v + e, vv);
      store_bf16<V>(ko + e, kv);
      store_bf16<V>(vo + e, vv);
    }
  }
}

// Rows [tok0, tok0 + 64) of head `head` of a [tokens, heads, D] bf16 scratch into a shared tile,
// asynchronously; rows at or past `valid` are zeros.
template <int D>
__device__ __forceinline__ void stage_tile(bf16* dst, const bf16* src, int64_t tok0, int64_t valid, int64_t heads,
                                           int64_t head, int tid) {
  constexpr int kChunks = D / 8;
  for (int e = tid; e < kTile * kChunks; e += kThreads) {
    const int r = e / kChunks, d = 8 * (e % kChunks);
    const bool ok = r < valid;
    const bf16* from = src + (ok ? ((tok0 + r) * heads + head) * D + d : 0);
    __pipeline_memcpy_async(dst + r * (D + 8) + d, from, 16, ok ? 0 : 16);
  }
}

// s[n] += A B^T and dp[n] += A2 B2^T over D for the warp, in one pass (two independent chains of
// products in flight): A's and A2's 16 rows at `a`, `a2`, B's and B2's 32 rows at `b`, `b2`, all
// row-major shared tiles (stride D + 8). B's rows are the n index (non-transposed ldmatrix, as K
// in S = Q K^T).
template <int D>
__device__ __forceinline__ void two_products(float (&s)[4][4], float (&dp)[4][4], const bf16* a, const bf16* b,
                                             const bf16* a2, const bf16* b2, int lane) {
  constexpr int SD = D + 8;
  const int ao = ((lane & 7) + ((lane >> 3) & 1) * 8) * SD + (lane >> 4) * 8;
  const int bo = ((lane & 7) + (lane >> 4) * 8) * SD + ((lane >> 3) & 1) * 8;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t af[4], af2[4];
    ldmatrix_x4<false>(af, a + ao + kk * 16);
    ldmatrix_x4<false>(af2, a2 + ao + kk * 16);
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t bf[4], bf2[4];
      ldmatrix_x4<false>(bf, b + bo + np * 16 * SD + kk * 16);
      ldmatrix_x4<false>(bf2, b2 + bo + np * 16 * SD + kk * 16);
      mma_bf16(s[2 * np], af, bf[0], bf[1]);
      mma_bf16(dp[2 * np], af2, bf2[0], bf2[1]);
      mma_bf16(s[2 * np + 1], af, bf[2], bf[3]);
      mma_bf16(dp[2 * np + 1], af2, bf2[2], bf2[3]);
    }
  }
}

// A 64-entry per-query vector of a tile (log-sum-exps or Di, [tokens, q_heads] in memory) into
// shared memory, asynchronously with the tile's rows (zeros past `valid`).
__device__ __forceinline__ void stage_stat(float* dst, const float* src, int64_t tok0, int64_t valid, int64_t heads,
                                           int64_t head, int tid) {
  if (tid < kTile) {
    const bool ok = tid < valid;
    __pipeline_memcpy_async(dst + tid, src + (ok ? (tok0 + tid) * heads + head : 0), 4, ok ? 0 : 4);
  }
}

// acc[m][n] += A B over a tile's 64 positions: A's 16 MT rows at `a` (a P or dS tile, stride kSP,
// the positions along its rows), B's 64 rows at `b` (a Q, dO or K tile, stride D + 8: the
// positions are its rows, so its fragments come transposed), 8 NS columns.
// kATrans: A's tile is stored transposed (the positions are its rows, A's rows its columns: a dS^T
// tile read as dS), its fragments then come transposed too.
template <int D, int MT, int NS, bool kATrans = false>
__device__ __forceinline__ void tile_mma(float (&acc)[MT][NS][4], const bf16* a, const bf16* b, int lane) {
  constexpr int SD = D + 8;
  const bf16* pa = kATrans ? a + (((lane >> 4) & 1) * 8 + (lane & 7)) * kSP + ((lane >> 3) & 1) * 8
                           : a + ((lane & 7) + ((lane >> 3) & 1) * 8) * kSP + (lane >> 4) * 8;
  const bf16* pb = b + (lane & 15) * SD + (lane >> 4) * 8;
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    uint32_t af[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
      ldmatrix_x4<kATrans>(af[mt], kATrans ? pa + kk * 16 * kSP + mt * 16 : pa + mt * 16 * kSP + kk * 16);
#pragma unroll
    for (int i = 0; i < NS; i += 2) {
      uint32_t bf[4];
      ldmatrix_x4<true>(bf, pb + kk * 16 * SD + i * 8);
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        mma_bf16(acc[mt][i], af[mt], bf[0], bf[1]);
        mma_bf16(acc[mt][i + 1], af[mt], bf[2], bf[3]);
      }
    }
  }
}

// The warp's probability and score-gradient elements of a tile pair, from its S and dP
// accumulators (16 rows x 32 columns): element (n, c) is row r0 + g + 8 (c / 2), column
// c0 + 8 n + 2 (lane % 4) + c % 2. kKeysAreRows: the rows are keys and the columns queries (the
// dK/dV kernel's S^T), else the other way round. Both go to shared tiles as bf16 (P only where
// `pt` is given), row-major as the accumulators are.
template <bool kKeysAreRows>
__device__ __forceinline__ void score_grads(const float (&s)[4][4], const float (&dp)[4][4], int r0, int c0,
                                            int64_t k0, int64_t q0, int64_t n, const float* lse, const float* di,
                                            float sl2, bool live, bf16* pt, bf16* dst, int lane) {
  const int g = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int nn = 0; nn < 4; ++nn)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int r = r0 + g + 8 * hr, c = c0 + nn * 8 + 2 * c4;
      float pv[2], dsv[2];
#pragma unroll
      for (int cc = 0; cc < 2; ++cc) {
        const int key = kKeysAreRows ? r : c + cc, query = kKeysAreRows ? c + cc : r;
        const bool ok = live && k0 + key <= q0 + query && q0 + query < n;
        const float pr = ok ? exp2f(s[nn][2 * hr + cc] * sl2 - lse[query]) : 0.f;
        pv[cc] = pr;
        dsv[cc] = pr * (dp[nn][2 * hr + cc] - di[query]);
      }
      if (pt != nullptr) *reinterpret_cast<uint32_t*>(pt + r * kSP + c) = pack_bf16(pv[0], pv[1]);
      *reinterpret_cast<uint32_t*>(dst + r * kSP + c) = pack_bf16(dsv[0], dsv[1]);
    }
}

// The warp's phase-2 accumulators (32 rows from position r0 of the row, D / 4 columns from dw)
// times `mul` into an f32 [tokens, D] view (`ts` floats between tokens); positions at or past n
// are left alone.
template <int NS>
__device__ __forceinline__ void store_rows(const float (&acc)[2][NS][4], float* dst, int64_t ts, int64_t begin,
                                           int64_t r0, int64_t n, int dw, float mul, int lane) {
  const int g = lane >> 2, c4 = lane & 3;
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int64_t pos = r0 + mt * 16 + g + 8 * hr;
      if (pos >= n) continue;
      float* row = dst + (begin + pos) * ts + dw + 2 * c4;
#pragma unroll
      for (int i = 0; i < NS; ++i) {
        row[i * 8] = acc[mt][i][2 * hr] * mul;
        row[i * 8 + 1] = acc[mt][i][2 * hr + 1] * mul;
      }
    }
}

constexpr int kTileBf16 = kTile * kTile;  // a dS tile in FlashBackwardParams::ds

// The first dS tile of (row, head) in FlashBackwardParams::ds: each row before holds q_heads
// triangles of t (t + 1) / 2 tiles (t: its query tiles), tile (query tile qt, key tile kt) of a
// triangle at qt (qt + 1) / 2 + kt.
__device__ __forceinline__ int64_t ds_tile0(const FlashBackwardParams& p, int64_t row, int64_t head) {
  auto tri = [&](int64_t r) {
    const int64_t t = (p.cu_seqlens[r + 1] - p.cu_seqlens[r] + kTile - 1) / kTile;
    return t * (t + 1) / 2;
  };
  int64_t off = 0;
  for (int64_t r = 0; r < row; ++r) off += p.q_heads * tri(r);
  return off + head * tri(row);
}

// Grid (rows * kv_heads, key tiles): the key tiles in order, so that those with the most query
// tiles start first. Phase 1 (S^T, dP^T): a warp per 16 keys x 32 queries; phase 2 (dV, dK): a
// warp per 32 keys x D / 4 dims, its accumulators kept across the whole loop.
template <int D>
__global__ void __launch_bounds__(kThreads, 1) flash_backward_dkdv_kernel(FlashBackwardParams p) {
  constexpr int SD = D + 8, kT = kTileElems<D>, NS = D / 32;
  extern __shared__ float4 smem4[];
  bf16* Ks = reinterpret_cast<bf16*>(smem4);
  bf16* Vs = Ks + kT;
  bf16* Qbuf = Vs + kT;       // [2] tiles: pair it in buffer it % 2
  bf16* dObuf = Qbuf + 2 * kT;
  bf16* Pt = dObuf + 2 * kT;  // [64 keys][kSP]
  bf16* dSt = Pt + kTile * kSP;
  float* lse_s = reinterpret_cast<float*>(dSt + kTile * kSP);  // [2][64]
  float* di_s = lse_s + 2 * kTile;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t kvh = blockIdx.x % p.kv_heads, row = blockIdx.x / p.kv_heads;
  const int64_t begin = p.cu_seqlens[row], n = p.cu_seqlens[row + 1] - begin;
  const int64_t kt = blockIdx.y, k0 = kt * kTile;
  if (k0 >= n) return;
  const int64_t group = p.q_heads / p.kv_heads;
  const int64_t q_tiles = (n + kTile - 1) / kTile - kt;  // the query tiles that see these keys
  const int64_t iters = group * q_tiles;
  const bf16* qb = static_cast<const bf16*>(p.qb);
  const bf16* dob = static_cast<const bf16*>(p.dob);

  auto q_start = [&](int64_t it) { return (kt + it % q_tiles) * kTile; };
  // The dS tiles of the group's first query head; each next head's triangle follows.
  const int64_t ds0 = p.ds != nullptr ? ds_tile0(p, row, kvh * group) : 0;
  const int64_t ds_tri = (kt + q_tiles) * (kt + q_tiles + 1) / 2;
  auto stage = [&](int64_t it) {
    if (it >= iters) return;
    const int64_t h = kvh * group + it / q_tiles, q0 = q_start(it);
    const int b = static_cast<int>(it & 1);
    stage_tile<D>(Qbuf + b * kT, qb, begin + q0, n - q0, p.q_heads, h, tid);
    stage_tile<D>(dObuf + b * kT, dob, begin + q0, n - q0, p.q_heads, h, tid);
    stage_stat(lse_s + b * kTile, p.lse, begin + q0, n - q0, p.q_heads, h, tid);
    stage_stat(di_s + b * kTile, p.di, begin + q0, n - q0, p.q_heads, h, tid);
  };
  stage_tile<D>(Ks, static_cast<const bf16*>(p.kb), begin + k0, n - k0, p.kv_heads, kvh, tid);
  stage_tile<D>(Vs, static_cast<const bf16*>(p.vb), begin + k0, n - k0, p.kv_heads, kvh, tid);
  stage(0);
  __pipeline_commit();

  const int kw = 16 * (warp & 3), qw = 32 * (warp >> 2);        // phase 1
  const int kw2 = 32 * (warp & 1), dw = (D / 4) * (warp >> 1);  // phase 2
  float dv[2][NS][4] = {}, dk[2][NS][4] = {};
  const float sl2 = p.scale * kLog2e;

  for (int64_t it = 0; it < iters; ++it) {
    __pipeline_wait_prior(0);
    __syncthreads();  // pair it landed; every warp is done with pair it - 1
    stage(it + 1);
    __pipeline_commit();
    const int b = static_cast<int>(it & 1);
    const bf16* Qs = Qbuf + b * kT;
    const bf16* dOs = dObuf + b * kT;
    const int64_t q0 = q_start(it);
    // A warp whose keys all come after its queries (on the diagonal tile) has only zeros.
    const bool live = k0 + kw <= q0 + qw + 31;
    float st[4][4] = {}, dpt[4][4] = {};
    if (live) two_products<D>(st, dpt, Ks + kw * SD, Qs + qw * SD, Vs + kw * SD, dOs + qw * SD, lane);
    score_grads<true>(st, dpt, kw, qw, k0, q0, n, lse_s + b * kTile, di_s + b * kTile, sl2, live, Pt, dSt, lane);
    __syncthreads();
    if (p.ds != nullptr) {  // dS^T for the dQ kernel: 64 rows of 128 bytes, 16 a thread-step
      const int64_t qt = q0 / kTile;
      bf16* dst = static_cast<bf16*>(p.ds) + (ds0 + (it / q_tiles) * ds_tri + qt * (qt + 1) / 2 + kt) * kTileBf16;
      for (int e = tid; e < kTile * 8; e += kThreads)
        *reinterpret_cast<uint4*>(dst + (e >> 3) * kTile + (e & 7) * 8) =
            *reinterpret_cast<const uint4*>(dSt + (e >> 3) * kSP + (e & 7) * 8);
    }
    tile_mma<D, 2, NS>(dv, Pt + kw2 * kSP, dOs + dw, lane);
    tile_mma<D, 2, NS>(dk, dSt + kw2 * kSP, Qs + dw, lane);
  }

  store_rows(dk, p.dk.ptr + kvh * p.dk.head_stride, p.dk.token_stride, begin, k0 + kw2, n, dw, p.scale, lane);
  store_rows(dv, p.dv.ptr + kvh * p.dv.head_stride, p.dv.token_stride, begin, k0 + kw2, n, dw, 1.f, lane);
}

// The block's (query head, row, query tile) in a dQ grid (rows * q_heads, query tiles), the query
// tiles in reverse so that those that see the most keys start first.
struct QueryTile {
  int64_t h, row, begin, n, qt;
  __device__ explicit QueryTile(const FlashBackwardParams& p)
      : h(blockIdx.x % p.q_heads),
        row(blockIdx.x / p.q_heads),
        begin(p.cu_seqlens[row]),
        n(p.cu_seqlens[row + 1] - begin),
        qt(static_cast<int64_t>(gridDim.y) - 1 - blockIdx.y) {}
};

// Grid (rows * q_heads, query tiles): the query tiles in reverse, so that those that see the most
// keys start first. Phase 1 (S, dP): a warp per 16 queries x 32 keys; phase 2 (dQ): a warp per 32
// queries x D / 4 dims.
template <int D>
__global__ void __launch_bounds__(kThreads, 1) flash_backward_dq_kernel(FlashBackwardParams p) {
  constexpr int SD = D + 8, kT = kTileElems<D>, NS = D / 32;
  extern __shared__ float4 smem4[];
  bf16* Qs = reinterpret_cast<bf16*>(smem4);
  bf16* dOs = Qs + kT;
  bf16* Kbuf = dOs + kT;  // [2] tiles: key tile t in buffer t % 2
  bf16* Vbuf = Kbuf + 2 * kT;
  bf16* dSs = Vbuf + 2 * kT;  // [64 queries][kSP]
  float* lse_s = reinterpret_cast<float*>(dSs + kTile * kSP);
  float* di_s = lse_s + kTile;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const QueryTile qtile(p);
  const int64_t h = qtile.h, begin = qtile.begin, n = qtile.n, qt = qtile.qt, q0 = qt * kTile;
  if (q0 >= n) return;
  const int64_t kvh = h / (p.q_heads / p.kv_heads), tiles = qt + 1;
  const bf16* kb = static_cast<const bf16*>(p.kb);
  const bf16* vb = static_cast<const bf16*>(p.vb);
  auto stage = [&](int64_t t) {
    if (t >= tiles) return;
    const int b = static_cast<int>(t & 1);
    stage_tile<D>(Kbuf + b * kT, kb, begin + t * kTile, n - t * kTile, p.kv_heads, kvh, tid);
    stage_tile<D>(Vbuf + b * kT, vb, begin + t * kTile, n - t * kTile, p.kv_heads, kvh, tid);
  };
  stage_tile<D>(Qs, static_cast<const bf16*>(p.qb), begin + q0, n - q0, p.q_heads, h, tid);
  stage_tile<D>(dOs, static_cast<const bf16*>(p.dob), begin + q0, n - q0, p.q_heads, h, tid);
  stage_stat(lse_s, p.lse, begin + q0, n - q0, p.q_heads, h, tid);
  stage_stat(di_s, p.di, begin + q0, n - q0, p.q_heads, h, tid);
  stage(0);
  __pipeline_commit();

  const int qw = 16 * (warp & 3), kw = 32 * (warp >> 2);        // phase 1
  const int qw2 = 32 * (warp & 1), dw = (D / 4) * (warp >> 1);  // phase 2
  float dq[2][NS][4] = {};
  const float sl2 = p.scale * kLog2e;

  for (int64_t t = 0; t < tiles; ++t) {
    __pipeline_wait_prior(0);
    __syncthreads();  // key tile t landed; every warp is done with tile t - 1
    stage(t + 1);
    __pipeline_commit();
    const int b = static_cast<int>(t & 1);
    const bf16* Ks = Kbuf + b * kT;
    const bf16* Vs = Vbuf + b * kT;
    const int64_t k0 = t * kTile;
    const bool live = k0 + kw <= q0 + qw + 15;
    float s[4][4] = {}, dp[4][4] = {};
    if (live) two_products<D>(s, dp, Qs + qw * SD, Ks + kw * SD, dOs + qw * SD, Vs + kw * SD, lane);
    score_grads<false>(s, dp, qw, kw, k0, q0, n, lse_s, di_s, sl2, live, nullptr, dSs, lane);
    __syncthreads();
    tile_mma<D, 2, NS>(dq, dSs + qw2 * kSP, Ks + dw, lane);
  }

  store_rows(dq, p.dq.ptr + h * p.dq.head_stride, p.dq.token_stride, begin, q0 + qw2, n, dw, p.scale, lane);
}

// dQ from the dS tiles the dK/dV kernel left: grid (rows * q_heads, query tiles), the query tiles
// in reverse; a warp per 32 queries x D / 4 dims. Key tile t and its dS^T tile in buffer t % 2.
template <int D>
__global__ void __launch_bounds__(kThreads, 2) flash_backward_dq_from_ds_kernel(FlashBackwardParams p) {
  constexpr int kT = kTileElems<D>, NS = D / 32;
  extern __shared__ float4 smem4[];
  bf16* Kbuf = reinterpret_cast<bf16*>(smem4);  // [2] tiles
  bf16* dSbuf = Kbuf + 2 * kT;                    // [2][64 keys][kSP]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const QueryTile qtile(p);
  const int64_t h = qtile.h, row = qtile.row, begin = qtile.begin, n = qtile.n, qt = qtile.qt, q0 = qt * kTile;
  if (q0 >= n) return;
  const int64_t kvh = h / (p.q_heads / p.kv_heads), tiles = qt + 1;
  const bf16* kb = static_cast<const bf16*>(p.kb);
  const bf16* ds = static_cast<const bf16*>(p.ds) + (ds_tile0(p, row, h) + qt * (qt + 1) / 2) * kTileBf16;
  auto stage = [&](int64_t t) {
    if (t >= tiles) return;
    const int b = static_cast<int>(t & 1);
    stage_tile<D>(Kbuf + b * kT, kb, begin + t * kTile, n - t * kTile, p.kv_heads, kvh, tid);
    for (int e = tid; e < kTile * 8; e += kThreads)
      __pipeline_memcpy_async(dSbuf + b * kTile * kSP + (e >> 3) * kSP + (e & 7) * 8,
                              ds + t * kTileBf16 + (e >> 3) * kTile + (e & 7) * 8, 16);
  };
  stage(0);
  __pipeline_commit();
  const int qw = 32 * (warp & 1), dw = (D / 4) * (warp >> 1);
  float dq[2][NS][4] = {};
  for (int64_t t = 0; t < tiles; ++t) {
    __pipeline_wait_prior(0);
    __syncthreads();  // tile t landed; every warp is done with tile t - 1
    stage(t + 1);
    __pipeline_commit();
    const int b = static_cast<int>(t & 1);
    tile_mma<D, 2, NS, true>(dq, dSbuf + b * kTile * kSP + qw, Kbuf + b * kT + dw, lane);
  }
  store_rows(dq, p.dq.ptr + h * p.dq.head_stride, p.dq.token_stride, begin, q0 + qw, n, dw, p.scale, lane);
}

template <int D>
constexpr size_t dkdv_smem() {
  return (6 * kTileElems<D> + 2 * kTile * kSP) * sizeof(bf16) + 4 * kTile * sizeof(float);
}
template <int D>
constexpr size_t dq_smem() {
  return (6 * kTileElems<D> + kTile * kSP) * sizeof(bf16) + 2 * kTile * sizeof(float);
}
template <int D>
constexpr size_t dq_from_ds_smem() {
  return (2 * kTileElems<D> + 2 * kTile * kSP) * sizeof(bf16);
}

template <typename Shape>
Status launch_all(const FlashBackwardParams& p, const Shape& shape, cudaStream_t stream) {
  const unsigned tiles = static_cast<unsigned>((p.max_len + kTile - 1) / kTile);
  const int64_t items = p.tokens * (p.q_heads + p.kv_heads);
  // Every view 16-byte aligned at each token and head: four floats an access.
  const auto a16 = [](const auto& v) {
    return v.ptr == nullptr ||
           (reinterpret_cast<uintptr_t>(v.ptr) % 16 == 0 && v.token_stride % 4 == 0 && v.head_stride % 4 == 0);
  };
  const bool vec4 = a16(p.q) && a16(p.k) && a16(p.v) && a16(p.gate) && a16(p.dgate) && a16(p.out) && a16(p.dout);
  const unsigned prep_blocks = static_cast<unsigned>((items + kWarps - 1) / kWarps);
  if (vec4) flash_backward_prep_kernel<4><<<prep_blocks, kThreads, 0, stream>>>(p);
  else flash_backward_prep_kernel<1><<<prep_blocks, kThreads, 0, stream>>>(p);
  KILN_RETURN_IF_ERROR(launch_status("flash_backward_prep_kernel", shape, stream));
  auto run = [&](auto dim) -> Status {
    constexpr int D = decltype(dim)::value;
    constexpr size_t s1 = dkdv_smem<D>(), s2 = dq_smem<D>(), s3 = dq_from_ds_smem<D>();
    KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(flash_backward_dkdv_kernel<D>), s1,
                                             "flash_backward_dkdv_kernel"));
    KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(flash_backward_dq_kernel<D>), s2,
                                             "flash_backward_dq_kernel"));
    KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(flash_backward_dq_from_ds_kernel<D>), s3,
                                             "flash_backward_dq_from_ds_kernel"));
    flash_backward_dkdv_kernel<D>
        <<<dim3(static_cast<unsigned>(p.rows * p.kv_heads), tiles), kThreads, s1, stream>>>(p);
    KILN_RETURN_IF_ERROR(launch_status("flash_backward_dkdv_kernel", shape, stream));
    const dim3 dq_grid(static_cast<unsigned>(p.rows * p.q_heads), tiles);
    if (p.ds != nullptr) {
      flash_backward_dq_from_ds_kernel<D><<<dq_grid, kThreads, s3, stream>>>(p);
      return launch_status("flash_backward_dq_from_ds_kernel", shape, stream);
    }
    flash_backward_dq_kernel<D><<<dq_grid, kThreads, s2, stream>>>(p);
    return launch_status("flash_backward_dq_kernel", shape, stream);
  };
  if (p.head_dim == 128) return run(std::integral_constant<int, 128>());
  return run(std::integral_constant<int, 256>());
}

}  // namespace

bool flash_backward_supports(int64_t head_dim) {
  if (head_dim != 128 && head_dim != 256) return false;
  const size_t most = head_dim == 128 ? std::max({dkdv_smem<128>(), dq_smem<128>(), dq_from_ds_smem<128>()})
                                      : std::max({dkdv_smem<256>(), dq_smem<256>(), dq_from_ds_smem<256>()});
  return static_cast<int64_t>(most) <= device_target().shared_optin;
}

int64_t flash_backward_ds_bytes(const int32_t* cu, int64_t rows, int64_t q_heads) {
  int64_t tiles = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t t = (cu[r + 1] - cu[r] + kTile - 1) / kTile;
    tiles += q_heads * t * (t + 1) / 2;
  }
  return tiles * kTileBf16 * static_cast<int64_t>(sizeof(bf16));
}

Status flash_backward(const FlashBackwardParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " max_len=" +
           std::to_string(p.max_len) + " q_heads=" + std::to_string(p.q_heads) + " kv_heads=" +
           std::to_string(p.kv_heads) + " head_dim=" + std::to_string(p.head_dim);
  };
  if (p.tokens == 0 || p.rows == 0) return {};
  if (!flash_backward_supports(p.head_dim))
    return invalid_argument("flash_backward: head_dim must be 128 or 256 (" + shape() + ")");
  if (p.kv_heads <= 0 || p.q_heads % p.kv_heads != 0)
    return invalid_argument("flash_backward: q_heads must be a multiple of kv_heads (" + shape() + ")");
  if (p.max_len < 1 || (p.max_len + kTile - 1) / kTile > 65535 || p.rows * p.q_heads > 0x7fffffff)
    return invalid_argument("flash_backward: grid out of range (" + shape() + ")");
  for (const void* s : {p.qb, p.dob, p.kb, p.vb, p.ds})
    if (reinterpret_cast<uintptr_t>(s) % 16 != 0)
      return invalid_argument("flash_backward: bf16 scratch must be 16-byte aligned (" + shape() + ")");
  return launch_all(p, shape, stream);
}

}  // namespace kiln::cuda
