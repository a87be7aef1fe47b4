// The chunked backward of the gated delta rule (gdn_chunked_backward.h): the two-pass forward
// keeps its records, the state entering each chunk and W; a reverse scan carries dS over the
// chunks (per row, value head and 32 state columns, as the forward scan); then one block per
// (row, chunk, value head) computes that chunk's gradients as block-wide products in shared
// memory, each a 3xTF32 product on tensor cores (f32-level accuracy; state and sums in f32).
#include <cuda_pipeline.h>

#include <algorithm>
#include <string>

#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_chunk_record.h"
#include "backend/cuda/kernels/gdn_chunked_backward.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_tf32.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kC = kGdnChunk;
constexpr int kBV = 32;  // state columns a scan block owns; columns of a gradient-pass tile
constexpr int kThreads = 256;

__host__ __device__ inline int64_t max_chunks_of(const GdnBackwardParams& p) { return (p.max_len + kC - 1) / kC; }

__host__ __device__ inline GdnForwardKept kept_of(const GdnBackwardParams& p) {
  return gdn_forward_kept(p.rows, max_chunks_of(p), p.v_heads, p.dk, p.dv);
}

// The forward's records, chunk states and W (p.kept, or recomputed into the scratch), and the
// scan's dSn [item][dk][dv] and dW [item][64][dv] (in the scratch); item as in gdn_forward_kept.
struct Chunks {
  const float *rec, *states, *w;
  float *dstates, *dw;
};

// The scratch: the forward's part (unless p.kept has it), then dSn, then dW.
int64_t scratch_floats(const GdnBackwardParams& p) {
  const int64_t items = p.rows * max_chunks_of(p) * p.v_heads;
  return (p.kept != nullptr ? 0 : kept_of(p).total) + items * (p.dk + kC) * p.dv;
}

// Copies a tile of `rows` x 32 columns (row stride `stride`) from a row-major matrix at src whose
// rows are `ld` floats apart, by cp.async, the caller committing the group; rows from `valid` on
// and columns from `cols` on are zero-filled. 16 bytes a copy where src, ld and cols allow, else 4.
// Every thread of the block takes part. (Plain loads here were each a full memory latency: their
// shared-memory stores kept the next load from being issued ahead.)
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t ld, int rows, int valid, int cols,
                                          int stride) {
  const bool v4 = ld % 4 == 0 && cols % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
  const int w = v4 ? 4 : 1, per_row = kBV / w;
#pragma unroll 1
  for (int e = threadIdx.x; e < rows * per_row; e += kThreads) {
    const int r = e / per_row, j = (e % per_row) * w;
    const bool in = r < valid && j < cols;
    const float* from = in ? src + r * ld + j : src;
    if (v4)
      __pipeline_memcpy_async(dst + r * stride + j, from, 16, in ? 0 : 16);
    else
      __pipeline_memcpy_async(dst + r * stride + j, from, 4, in ? 0 : 4);
  }
}

// ---- The reverse scan over the chunks: dS (the gradient of the state leaving the chunk in
// hand) per block of 32 columns; for each chunk, dSn is kept, dW = D (Kn dSn) + Mq^T dout is
// written, and dS becomes exp(G_L) dSn + Qn^T (gamma dout) - Wk^T dW, each a warp-tiled 3xTF32
// product on tensor cores (mma_tf32.cuh). Strides as in the forward scan: 4 mod 32 for a row-major
// A fragment (Kn), 8 mod 32 for a transposed one (Qn, Wk, Mq) and for a B fragment. dS and -dW,
// B operands of every warp, are split into tf32 halves once, where they are written.

constexpr int kSP = kBV + 8;  // dS, dout, dW rows
constexpr int kMT = kC + 8;   // Mq rows, read transposed

template <int DK>
struct ScanLayout {
  static constexpr int kKP = DK + 4;          // Kn rows
  static constexpr int kKT = DK + 8;          // Qn, Wk rows
  static constexpr int kdS = 0;               // [DK][kSP]
  static constexpr int kK = kdS + DK * kSP;   // [kC][kKP]
  static constexpr int kQ = kK + kC * kKP;    // [kC][kKT]
  static constexpr int kWk = kQ + kC * kKT;   // [kC][kKT]
  static constexpr int kM = kWk + kC * kKT;   // [kC][kMT]
  static constexpr int kO = kM + kC * kMT;    // [kC][kSP]: dout, then gamma dout
  static constexpr int kdSh = kO + kC * kSP;        // [DK][kSP] x 2: dS split into tf32 halves
  static constexpr int kdWh = kdSh + 2 * DK * kSP;  // [kC][kSP] x 2: -dW, likewise
  static constexpr int kG = kdWh + 2 * kC * kSP;    // [kC]
  static constexpr int kFloats = kG + kC;
};

// Grid: (v_heads, ceil(dv / 32), rows).
template <int DK>
__global__ void __launch_bounds__(kThreads, 1) gdn_chunk_bwd_scan_kernel(GdnBackwardParams p, Chunks ch) {
  using L = ScanLayout<DK>;
  constexpr int KP = L::kKP, KT = L::kKT;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* dS = smem + L::kdS;
  float* Ks = smem + L::kK;
  float* Qs = smem + L::kQ;
  float* Wks = smem + L::kWk;
  float* Mq = smem + L::kM;
  float* O = smem + L::kO;
  uint32_t* dSh = reinterpret_cast<uint32_t*>(smem + L::kdSh);
  uint32_t* dSl = dSh + DK * kSP;
  uint32_t* dWh = reinterpret_cast<uint32_t*>(smem + L::kdWh);
  uint32_t* dWl = dWh + kC * kSP;
  float* G = smem + L::kG;
  const int h = blockIdx.x, row = blockIdx.z;
  const int64_t dv = p.dv, j0 = static_cast<int64_t>(blockIdx.y) * kBV;
  const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
  const int tid = threadIdx.x, warp = tid >> 5;
  const GdnChunkRecord R{DK, dv};
  const int64_t max_chunks = max_chunks_of(p);

  for (int e = tid; e < DK * kSP; e += kThreads) {
    dS[e] = 0.f;
    dSh[e] = dSl[e] = 0u;
  }
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  const int chunks = static_cast<int>((t1 - t0 + kC - 1) / kC);
  auto record = [&](int c) { return ch.rec + ((row * max_chunks + c) * p.v_heads + h) * R.floats(); };
  // As the forward scan: the record loads run ahead in cp.async groups, each into its buffer once
  // the buffer's last reader of the previous chunk (the next one up) is done: Kn and Mq after dW,
  // Qn and Wk at the top of the chunk (waited for only before the dS update). A group is
  // committed even when empty, so every wait counts alike.
  auto load_km = [&](int c) {
    if (c >= 0) {
      load_record_rows<kThreads>(Ks, KP, record(c) + R.k(), DK);
      load_record_rows<kThreads>(Mq, kMT, record(c) + R.mq(), kC);
    }
    __pipeline_commit();
  };
  load_km(chunks - 1);
  for (int c = chunks - 1; c >= 0; --c) {
    const int64_t c0 = t0 + static_cast<int64_t>(c) * kC;
    const int n = t1 - c0 < kC ? static_cast<int>(t1 - c0) : kC;
    const int n8 = (n + 7) & ~7;  // rows from n on are zero in every record and in dout's tile
    const int64_t item = (row * max_chunks + c) * p.v_heads + h;
    const float* rec = record(c);
    __syncthreads();  // the previous chunk is done with dS, Qn, Wk, dout and G
    float* kept = ch.dstates + item * DK * dv + j0;
    for (int e = tid; e < DK * kBV; e += kThreads) {
      const int d = e / kBV, j = e % kBV;
      if (j < bv) kept[d * dv + j] = dS[d * kSP + j];
    }
    load_tile(O, p.dout.at(c0, h) + j0, p.dout.token_stride, kC, n, bv, kSP);
    __pipeline_commit();
    load_record_rows<kThreads>(Qs, KT, rec + R.q(), DK);
    load_record_rows<kThreads>(Wks, KT, rec + R.wk(), DK);
    __pipeline_commit();
    if (tid < kC) G[tid] = rec[R.g() + tid];
    __pipeline_wait_prior(1);  // Kn, Mq and dout; Qn and Wk may still be in flight
    __syncthreads();

    // dW: rows 16 (warp / 2) .. + 15, columns 16 (warp % 2) .. + 15 a warp. Mq is zero above the
    // diagonal, so the sum over s >= t starts at the tile's first row.
    const float glast = G[kC - 1];
    {
      const int r0 = 16 * (warp >> 1), n0 = 16 * (warp & 1);
      float acc[2][4] = {};
      warp_mma3(acc, 0, DK, [&](int r, int d) { return Ks[(r0 + r) * KP + d]; },
                [&](int d, int j) { return Tf32Pair{dSh[d * kSP + n0 + j], dSl[d * kSP + n0 + j]}; });
      warp_tile_each(acc, [&](int r, int, float& v) { v *= expf(glast - G[r0 + r]); });
      warp_mma3(acc, r0, n8, [&](int r, int s) { return Mq[s * kMT + r0 + r]; },
                [&](int s, int j) { return O[s * kSP + n0 + j]; });
      float* dw_glob = ch.dw + item * kC * dv + j0;
      warp_tile_each(acc, [&](int r, int j, float v) {
        const int t = r0 + r;
        store_split(-v, dWh, dWl, t * kSP + n0 + j);
        if (n0 + j < bv) dw_glob[t * dv + n0 + j] = v;
      });
    }
    __syncthreads();
    load_km(c - 1);  // Kn and Mq are done with
    for (int e = tid; e < kC * kBV; e += kThreads) {
      const int t = e / kBV, j = e % kBV;
      O[t * kSP + j] *= expf(G[t]);
    }
    __pipeline_wait_prior(1);  // Qn and Wk (the next chunk's Kn and Mq may still be in flight)
    __syncthreads();
    // dS = exp(G_L) dSn + Qn^T (gamma dout) - Wk^T dW.
    block_update_32<DK, kSP>(dS, dSh, dSl, expf(glast), [&](auto& acc, int d0, int n0) {
      warp_mma3(acc, 0, n8, [&](int r, int t) { return Qs[t * KT + d0 + r]; },
                [&](int t, int j) { return O[t * kSP + n0 + j]; });
      warp_mma3(acc, 0, n8, [&](int r, int t) { return Wks[t * KT + d0 + r]; },
                [&](int t, int j) { return Tf32Pair{dWh[t * kSP + n0 + j], dWl[t * kSP + n0 + j]}; });
    });
  }
}

// ---- The gradient pass: one block per (row, chunk, value head), all dv columns. Its products
// are warp-tiled 3xTF32 products on tensor cores (mma_tf32.cuh): a [64][N] result (N = 64 or dk)
// is the 8 warps' tiles, warp w owning rows 16 (w % 4) .. + 15 and columns (w / 4) N / 2 .. + N / 2
// - 1. Shared-memory strides follow the scans' rule (every fragment load hits 32 distinct banks):
// 4 mod 32 for a matrix read as A(r, k) = X[r][k] or B(k, c) = X[c][k], 8 mod 32 for one read as
// B(k, c) = X[k][c].

constexpr int kTS = kBV + 4;  // row stride of a [rows][32] tile
constexpr int kEL = kC + 4;   // row stride of a [64][64] matrix
constexpr int kYS = kBV + 8;  // row stride of a [64][32] tile read as B(k, c) = Y[k][c]

template <int N>
struct WarpTile {  // the warp's first row and column; its N / 16 accumulator tiles are 16 x 8
  int r0, n0;
  // The block row of the thread's row h of two (rows g and g + 8 of the tile).
  __device__ int row(int h) const { return r0 + ((threadIdx.x & 31) >> 2) + 8 * h; }
};

template <int N>
__device__ __forceinline__ WarpTile<N> warp_tile() {
  const int w = threadIdx.x >> 5;
  return {16 * (w & 3), (w >> 2) * (N / 2)};
}

// acc += sum_{k < K} a(t, k) b(k, c) over the warp's tile; a and b take block coordinates.
// P: 3xTF32 (3) or one tf32 pass (1), as warp_mma.
template <int P, int K, int N, typename FA, typename FB>
__device__ __forceinline__ void tile_mma(float (&acc)[N / 16][4], WarpTile<N> w, FA a, FB b) {
  warp_mma<P, N / 16, 1>(acc, 0, K, [&](int r, int k) { return a(w.r0 + r, k); },
                         [&](int k, int c) { return b(k, w.n0 + c); });
}

// f(x, t, c, v) for each accumulator v of the thread, at block row t and column c; x = 4 nt + e
// (compile-time once unrolled) names the slot: the thread's row (x >> 1) & 1 of two (rows g and
// g + 8 of the tile) and its column x >> 2, x & 1 (2 a tile).
template <int N, typename F>
__device__ __forceinline__ void tile_each(float (&acc)[N / 16][4], WarpTile<N> w, F f) {
  const int c = w.n0 + 2 * (threadIdx.x & 3);
#pragma unroll
  for (int nt = 0; nt < N / 16; ++nt)
#pragma unroll
    for (int e = 0; e < 4; ++e) f(4 * nt + e, w.row(e >> 1), c + 8 * nt + (e & 1), acc[nt][e]);
}

// Adds the thread's partial sums of its two rows, s[h] for row g + 8 h of the tile, summed over the
// quad (the 4 lanes that share those rows), into to[t], one atomic a row.
template <int N>
__device__ __forceinline__ void add_rows(WarpTile<N> w, const float (&s)[2], float* to) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float v = s[h];
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    if ((lane & 3) == 0) atomicAdd(&to[w.row(h)], v);
  }
}

// Waits for every cp.async this thread issued, then for the block: the copied tiles are readable.
__device__ __forceinline__ void copies_landed() {
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
}

// Subtracts the thread's partial sums of its columns, s[nt][e] for column 8 nt + 2 q + e of the
// warp's tile, summed over the tile's rows (the 8 lanes that share those columns), from to[c].
template <int N>
__device__ __forceinline__ void sub_columns(WarpTile<N> w, const float (&s)[N / 16][2], float* to) {
  const int lane = threadIdx.x & 31;
#pragma unroll
  for (int nt = 0; nt < N / 16; ++nt)
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float v = s[nt][e];
      for (int o = 4; o < 32; o <<= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
      if (lane < 4) atomicAdd(&to[w.n0 + 8 * nt + 2 * lane + e], -v);
    }
}

// Mt = (I + A)^-T for a strictly lower-triangular [64][64] A (row stride kEL; Mt likewise):
// T = (I + A)^-1 by blocks of 16, the diagonal blocks by substitution (a thread a column), then
// block (i, j), i > j, by a warp, one level i - j at a time: T_ij = -T_ii sum_{k=j}^{i-1} A_ik T_kj.
// Stored transposed, Mt[t][s] = T[s][t]. Every thread of the block takes part; ends with a barrier.
__device__ __forceinline__ void invert_unit_lower_transposed(const float* A, float* Mt) {
  const int tid = threadIdx.x, warp = tid >> 5;
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int t = e / kC, s = e % kC;
    if (t / 16 > s / 16) Mt[t * kEL + s] = 0.f;
  }
  if (tid < kC) {
    const int o = 16 * (tid / 16), c = tid % 16;
    float x[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float v = r == c ? 1.f : 0.f;
#pragma unroll
      for (int s = 0; s < r; ++s) v -= A[(o + r) * kEL + o + s] * x[s];
      x[r] = v;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) Mt[(o + c) * kEL + o + r] = x[r];
  }
  __syncthreads();
  for (int level = 1; level < 4; ++level) {
    if (warp < 4 - level) {
      const int j = warp, i = warp + level;
      float* Z = Mt + 16 * j * kEL + 16 * i;  // Mt's block (j, i): Z^T, then T_ij^T
      float z[2][4] = {};
      warp_mma3<2, 1>(z, 16 * j, 16 * i, [&](int r, int k) { return A[(16 * i + r) * kEL + k]; },
                [&](int k, int c) { return Mt[(16 * j + c) * kEL + k]; });
      warp_tile_each(z, [&](int r, int c, float v) { Z[c * kEL + r] = v; });
      __syncwarp();
      float y[2][4] = {};
      warp_mma3<2, 1>(y, 0, 16, [&](int r, int k) { return Mt[(16 * i + k) * kEL + 16 * i + r]; },
                [&](int k, int c) { return Z[c * kEL + k]; });
      __syncwarp();  // Z is read
      warp_tile_each(y, [&](int r, int c, float v) { Z[c * kEL + r] = -v; });
    }
    __syncthreads();
  }
}

template <int DK>
struct GradLayout {
  static constexpr int kQK = DK + 8;          // Q, K rows: read as B(k, d) = X[k][d]
  static constexpr int kWX = DK + 4;          // Wk, Xw rows: read as B(k, i) = X[i][k], A(t, k) = X[t][k]
  static constexpr int kQ = 0;                // [kC][kQK]
  static constexpr int kK = kQ + kC * kQK;    // [kC][kQK]
  static constexpr int kWk = kK + kC * kQK;   // [kC][kWX]
  static constexpr int kAe = kWk + kC * kWX;  // [kC][kEL]: exp(G_t - G_i) k_t . k_i for i < t, else 0
  static constexpr int kE = kAe + kC * kEL;   // [kC][kEL]: E, then A, then F
  static constexpr int kEt = kE + kC * kEL;   // [kC][kEL]: E^T, then F^T
  static constexpr int kT = kEt + kC * kEL;   // tiles: S0, dSn [DK][kTS], W, dW, dout [kC][kTS];
                                              // then Xw [kC][kWX] and dXu, U, V [kC][kTS] after it
  static constexpr int kTileFloats = std::max(2 * DK * kTS + 3 * kC * kTS, kC * kWX + 3 * kC * kTS);
  static constexpr int kVec = kT + kTileFloats;  // G, beta, gamma, D, dG, dbeta [kC]; 32 for a block sum
  static constexpr int kFloats = kVec + 6 * kC + 32;
};

// Grid: (v_heads, max chunks, rows). P: the products' tf32 passes (tile_mma).
template <int DK, int P>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_chunk_bwd_grad_kernel(GdnBackwardParams p, GdnChunkedBackwardBuffers b, Chunks ch) {
  using L = GradLayout<DK>;
  constexpr int QK = L::kQK, WX = L::kWX, ND = DK / 16;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Qs = smem + L::kQ;
  float* Ks = smem + L::kK;
  float* Wks = smem + L::kWk;
  float* Ae = smem + L::kAe;
  float* Es = smem + L::kE;
  float* Et = smem + L::kEt;
  float* Tl = smem + L::kT;
  float* G = smem + L::kVec;
  float* beta = G + kC;
  float* gam = beta + kC;
  float* D = gam + kC;
  float* dG = D + kC;
  float* dB = dG + kC;
  float* red = dB + kC;

  const int h = blockIdx.x, c = blockIdx.y, row = blockIdx.z;
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1], c0 = t0 + static_cast<int64_t>(c) * kC;
  if (c0 >= t1) return;  // the whole block
  const int n = t1 - c0 < kC ? static_cast<int>(t1 - c0) : kC;
  const int64_t dv = p.dv, H = p.v_heads;
  const int64_t item = (row * max_chunks_of(p) + c) * H + h;
  const GdnChunkRecord R{DK, dv};
  const float* rec = ch.rec + item * R.floats();
  const float* S0g = ch.states + item * DK * dv;
  const float* Wg = ch.w + item * kC * dv;
  const float* dSg = ch.dstates + item * DK * dv;
  float* dWg = ch.dw + item * kC * dv;  // dW; then dXu in place
  const int tid = threadIdx.x;
  const WarpTile<DK> wd = warp_tile<DK>();  // [kC][DK] results: dq, dk and their parts
  const WarpTile<kC> wc = warp_tile<kC>();  // [kC][kC] results
  auto exp_gap = [&](int t, int i) { return expf(G[t] - G[i]); };

  // 0. Q, K, Wk and the gates; Ae.
  load_record_rows<kThreads>(Qs, QK, rec + R.q(), DK);
  load_record_rows<kThreads>(Ks, QK, rec + R.k(), DK);
  load_record_rows<kThreads>(Wks, WX, rec + R.wk(), DK);
  __pipeline_commit();
  if (tid < kC) {
    const int t = tid;
    G[t] = rec[R.g() + t];
    beta[t] = t < n ? b.beta[(c0 + t) * H + h] : 0.f;
    dG[t] = 0.f;
    dB[t] = 0.f;
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  if (tid < kC) {
    gam[tid] = expf(G[tid]);
    D[tid] = expf(G[kC - 1] - G[tid]);
  }
  {
    float acc[4][4] = {};
    tile_mma<P, DK>(acc, wc, [&](int t, int k) { return Ks[t * QK + k]; }, [&](int k, int i) { return Ks[i * QK + k]; });
    tile_each(acc, wc, [&](int, int t, int i, float v) { Ae[t * kEL + i] = i < t ? exp_gap(t, i) * v : 0.f; });
  }

  // 1. Over tiles of 32 value columns: aq = dout S0^T, ak = W dSn^T, ay = dW S0^T (each [kC][DK]),
  //    am = dout W^T ([kC][kC]), sdot = <dSn, S0>.
  float aq[ND][4] = {}, ak[ND][4] = {}, ay[ND][4] = {}, am[4][4] = {};
  float sdot = 0.f;
  {
    float* S0t = Tl;
    float* dSt = S0t + DK * kTS;
    float* Wt = dSt + DK * kTS;
    float* dWt = Wt + kC * kTS;
    float* Ot = dWt + kC * kTS;
    for (int64_t j0 = 0; j0 < dv; j0 += kBV) {
      const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
      __syncthreads();  // the previous tile is consumed
      load_tile(S0t, S0g + j0, dv, DK, DK, bv, kTS);
      load_tile(dSt, dSg + j0, dv, DK, DK, bv, kTS);
      load_tile(Wt, Wg + j0, dv, kC, kC, bv, kTS);
      load_tile(dWt, dWg + j0, dv, kC, kC, bv, kTS);
      load_tile(Ot, p.dout.at(c0, h) + j0, p.dout.token_stride, kC, n, bv, kTS);
      copies_landed();
      auto ot = [&](int t, int k) { return Ot[t * kTS + k]; };
      auto s0t = [&](int k, int d) { return S0t[d * kTS + k]; };
      tile_mma<P, kBV>(aq, wd, ot, s0t);
      tile_mma<P, kBV>(ak, wd, [&](int t, int k) { return Wt[t * kTS + k]; }, [&](int k, int d) { return dSt[d * kTS + k]; });
      tile_mma<P, kBV>(ay, wd, [&](int t, int k) { return dWt[t * kTS + k]; }, s0t);
      tile_mma<P, kBV>(am, wc, ot, [&](int k, int i) { return Wt[i * kTS + k]; });
      for (int e = tid; e < DK * kBV; e += kThreads) {
        const int idx = (e / kBV) * kTS + e % kBV;
        sdot += S0t[idx] * dSt[idx];
      }
    }
  }
  sdot = block_sum(sdot, red);  // its barriers also end the tiles' use

  // dG from out (gamma_t Q_t . (dout S0^T)_t) and from S_next (D_t dD_t, dD_t = K_t . (W dSn^T)_t,
  // moved from position t to the last; exp(G_L) <dSn, S0> at the last); then aq = gamma (dout
  // S0^T) and ak = D (W dSn^T); Xw = -dW S0^T.
  float* Xw = Tl;  // [kC][WX]: -dW S0^T, then T^T of it
  {
    float rq[2] = {}, rk[2] = {};
    tile_each(aq, wd, [&](int x, int t, int d, float& v) {
      rq[(x >> 1) & 1] += Qs[t * QK + d] * v;
      v *= gam[t];  // dq's first term, gamma (dout S0^T)
    });
    tile_each(ak, wd, [&](int x, int t, int d, float& v) {
      rk[(x >> 1) & 1] += Ks[t * QK + d] * v;
      v *= D[t];  // dk's first term, D (W dSn^T)
    });
    tile_each(ay, wd, [&](int, int t, int d, float v) { Xw[t * WX + d] = -v; });
    float dg[2], last = 0.f;
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int t = wd.row(s);
      dg[s] = gam[t] * rq[s] - D[t] * rk[s];
      last += D[t] * rk[s];
    }
    add_rows(wd, dg, dG);
    last = warp_sum(last);
    if ((tid & 31) == 0) atomicAdd(&dG[kC - 1], last);
    if (tid == 0) atomicAdd(&dG[kC - 1], gam[kC - 1] * sdot);
  }

  // 2. P = dMq o Mq (dMq = am): dG_t += sum_{i <= t} P[t, i] - sum_{s >= t} P[s, t]; E = dMq
  //    exp(G_t - G_i) on and below the diagonal, into Es and (transposed) Et; then aq += E K and
  //    ak += E^T Q.
  {
    const float* M = rec + R.mq();
    float mq[16];  // loaded ahead of the stores below, which would otherwise hold each load back
    tile_each(am, wc, [&](int x, int t, int i, float) { mq[x] = M[t * kC + i]; });
    float rs[2] = {}, cs[4][2] = {};
    tile_each(am, wc, [&](int x, int t, int i, float v) {
      const bool on = i <= t;
      const float pv = on ? v * mq[x] : 0.f;
      rs[(x >> 1) & 1] += pv;
      cs[x >> 2][x & 1] += pv;
      const float e = on ? v * exp_gap(t, i) : 0.f;
      Es[t * kEL + i] = e;
      Et[i * kEL + t] = e;
    });
    add_rows(wc, rs, dG);
    sub_columns(wc, cs, dG);
  }
  __syncthreads();
  tile_mma<P, kC>(aq, wd, [&](int t, int k) { return Es[t * kEL + k]; }, [&](int k, int d) { return Ks[k * QK + d]; });
  tile_mma<P, kC>(ak, wd, [&](int t, int k) { return Et[t * kEL + k]; }, [&](int k, int d) { return Qs[k * QK + d]; });
  // dq is complete and dk's first terms are: both go out now, freeing their registers for the
  // solve's products (step 4 adds the rest of dk to what is stored).
  auto at = [&](float* base, int t, int d) { return base + ((c0 + t) * H + h) * DK + d; };
  auto store_rows = [&](float* base, float (&v)[ND][4]) {
    tile_each(v, wd, [&](int, int t, int d, float x) {
      if (t < n) *at(base, t, d) = x;
    });
  };
  store_rows(b.dqp, aq);
  store_rows(b.dkp, ak);
  __syncthreads();

  // 3. A = beta_t Ae into Es. Then the solve's gradient X = (I + A)^-T Y for Y = [dW | -dW S0^T]
  //    (x_t = y_t - sum_{s > t} A[s, t] x_s) as products: M = (I + A)^-T into Mt (Et's space),
  //    then X = M Y, a tile of dW's columns at a time (dXu over dW in the scratch, dv = beta dXu
  //    out), and dXw in place in Xw.
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int t = e / kC, i = e % kC;
    Es[t * kEL + i] = beta[t] * Ae[t * kEL + i];
  }
  __syncthreads();
  float* Mt = Et;
  invert_unit_lower_transposed(Es, Mt);
  auto m = [&](int t, int s) { return Mt[t * kEL + s]; };
  {
    float* Yt = Tl + kC * WX;  // [kC][kYS]
    const WarpTile<kBV> wy = warp_tile<kBV>();
    for (int64_t j0 = 0; j0 < dv; j0 += kBV) {
      const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
      __syncthreads();  // the previous tile is consumed
      load_tile(Yt, dWg + j0, dv, kC, kC, bv, kYS);
      copies_landed();
      float x[kBV / 16][4] = {};
      tile_mma<P, kC>(x, wy, m, [&](int s, int c) { return Yt[s * kYS + c]; });
      float* dvo = p.dv_out.at(c0, h) + j0;
      tile_each(x, wy, [&](int, int t, int c, float v) {
        if (c >= bv) return;
        dWg[t * dv + j0 + c] = v;
        if (t < n) dvo[t * p.dv_out.token_stride + c] = beta[t] * v;
      });
    }
  }
  {
    float x[ND][4] = {};
    tile_mma<P, kC>(x, wd, m, [&](int s, int d) { return Xw[s * WX + d]; });
    __syncthreads();  // every warp has read Xw
    tile_each(x, wd, [&](int, int t, int d, float v) { Xw[t * WX + d] = v; });
  }
  __syncthreads();

  // 4. dA = -(dXu U^T + dXw Wk^T) below the diagonal (dbeta gathers V_t . dXu_t on the way);
  //    F = dA beta_t exp(G_t - G_i) into Es and (transposed) Et; the rest of dk: F K + F^T K +
  //    beta gamma dXw.
  float ad[4][4] = {};
  {
    float* dXut = Tl + kC * WX;
    float* Ut = dXut + kC * kTS;
    float* Vt = Ut + kC * kTS;
    for (int64_t j0 = 0; j0 < dv; j0 += kBV) {
      const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
      __syncthreads();  // the previous tile is consumed
      load_tile(dXut, dWg + j0, dv, kC, kC, bv, kTS);
      load_tile(Ut, rec + R.u() + j0, dv, kC, kC, bv, kTS);
      load_tile(Vt, p.v.at(c0, h) + j0, p.v.token_stride, kC, n, bv, kTS);
      copies_landed();
      tile_mma<P, kBV>(ad, wc, [&](int t, int k) { return dXut[t * kTS + k]; }, [&](int k, int i) { return Ut[i * kTS + k]; });
      if (tid < kC) {
        float s = 0.f;
        for (int j = 0; j < kBV; ++j) s += Vt[tid * kTS + j] * dXut[tid * kTS + j];
        dB[tid] += s;
      }
    }
  }
  tile_mma<P, DK>(ad, wc, [&](int t, int k) { return Xw[t * WX + k]; }, [&](int k, int i) { return Wks[i * WX + k]; });
  __syncthreads();  // dB's plain updates above are done before the atomics below; every warp is done with Et
  {
    float rb[2] = {}, rg[2] = {}, cg[4][2] = {};
    tile_each(ad, wc, [&](int x, int t, int i, float v) {
      float f = 0.f;
      if (i < t) {
        const float dA = -v;
        rb[(x >> 1) & 1] += dA * Ae[t * kEL + i];
        const float qa = dA * Es[t * kEL + i];  // dA A
        rg[(x >> 1) & 1] += qa;
        cg[x >> 2][x & 1] += qa;
        f = dA * beta[t] * exp_gap(t, i);
      }
      Es[t * kEL + i] = f;  // each element read and written by its own thread
      Et[i * kEL + t] = f;
    });
    add_rows(wc, rb, dB);
    add_rows(wc, rg, dG);
    sub_columns(wc, cg, dG);
  }
  __syncthreads();
  float ak2[ND][4] = {};
  tile_mma<P, kC>(ak2, wd, [&](int t, int k) { return Es[t * kEL + k]; }, [&](int k, int d) { return Ks[k * QK + d]; });
  tile_mma<P, kC>(ak2, wd, [&](int t, int k) { return Et[t * kEL + k]; }, [&](int k, int d) { return Ks[k * QK + d]; });
  {
    float rk[2] = {};
    tile_each(ak2, wd, [&](int x, int t, int d, float& v) {
      const float xw = Xw[t * WX + d];
      v += beta[t] * gam[t] * xw;
      rk[(x >> 1) & 1] += Ks[t * QK + d] * xw;
    });
    float rb[2], rg[2];
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const int t = wd.row(s);
      rb[s] = gam[t] * rk[s];
      rg[s] = beta[t] * gam[t] * rk[s];
    }
    add_rows(wd, rb, dB);
    add_rows(wd, rg, dG);
  }
  __syncthreads();

  // 5. dg = the reverse cumulative sum of dG inside the chunk; dg, dbeta and the rest of dk out.
  if (tid == 0) {
    float run = 0.f;
    for (int t = kC - 1; t >= 0; --t) {
      run += dG[t];
      dG[t] = run;
    }
  }
  __syncthreads();
  if (tid < n) {
    const int64_t o = (c0 + tid) * H + h;
    b.dgp[o] = dG[tid];
    b.dbp[o] = dB[tid];
  }
  // What step 2 stored, all loaded before any store.
  tile_each(ak2, wd, [&](int, int t, int d, float& v) {
    if (t < n) v += *at(b.dkp, t, d);
  });
  store_rows(b.dkp, ak2);
}
template <int DK>
size_t smem_bytes() {
  return std::max(ScanLayout<DK>::kFloats, GradLayout<DK>::kFloats) * sizeof(float);
}

std::string shape_of(const GdnBackwardParams& p) {
  return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " k_heads=" +
         std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) +
         " dv=" + std::to_string(p.dv) + " max_len=" + std::to_string(p.max_len) + " chunked";
}

template <int DK>
Status launch(const GdnBackwardParams& p, const GdnChunkedBackwardBuffers& b, cudaStream_t stream) {
  const size_t scan_smem = ScanLayout<DK>::kFloats * sizeof(float), grad_smem = GradLayout<DK>::kFloats * sizeof(float);
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunk_bwd_scan_kernel<DK>),
                                           static_cast<int64_t>(scan_smem), "gdn_chunk_bwd_scan_kernel"));
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunk_bwd_grad_kernel<DK, 3>),
                                           static_cast<int64_t>(grad_smem), "gdn_chunk_bwd_grad_kernel"));
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunk_bwd_grad_kernel<DK, 1>),
                                           static_cast<int64_t>(grad_smem), "gdn_chunk_bwd_grad_kernel"));
  const int64_t max_chunks = max_chunks_of(p);
  const GdnForwardKept kept = kept_of(p);
  const int64_t items = p.rows * max_chunks * p.v_heads;
  const float* fwd = p.kept != nullptr ? p.kept : b.scratch;
  float* own = p.kept != nullptr ? b.scratch : b.scratch + kept.total;
  const Chunks ch{fwd + kept.records, fwd + kept.states, fwd + kept.w, own, own + items * p.dk * p.dv};

  if (p.kept == nullptr) {  // the forward's records, the state entering each chunk, and W
    GatedDeltaRuleParams f;
    f.rows = p.rows;
    f.tokens = p.tokens;
    f.k_heads = p.k_heads;
    f.v_heads = p.v_heads;
    f.dk = p.dk;
    f.dv = p.dv;
    f.q = p.q;
    f.k = p.k;
    f.v = p.v;
    f.a = p.a;
    f.b = p.b;
    f.a_log = p.a_log;
    f.dt_bias = p.dt_bias;
    f.cu_seqlens = p.cu_seqlens;
    f.zero_state = true;
    f.scratch = b.scratch + kept.records;
    f.max_chunks = max_chunks;
    f.chunk_states = b.scratch + kept.states;
    f.chunk_w = b.scratch + kept.w;
    KILN_RETURN_IF_ERROR(gated_delta_rule_chunked(f, stream));
  }

  auto shape = [&] { return shape_of(p); };
  const dim3 scan_grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>((p.dv + kBV - 1) / kBV),
                       static_cast<unsigned>(p.rows));
  gdn_chunk_bwd_scan_kernel<DK><<<scan_grid, kThreads, scan_smem, stream>>>(p, ch);
  KILN_RETURN_IF_ERROR(launch_status("gdn_chunk_bwd_scan_kernel", shape, stream));
  const dim3 grad_grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>(max_chunks),
                       static_cast<unsigned>(p.rows));
  if (p.tf32) gdn_chunk_bwd_grad_kernel<DK, 1><<<grad_grid, kThreads, grad_smem, stream>>>(p, b, ch);
  else gdn_chunk_bwd_grad_kernel<DK, 3><<<grad_grid, kThreads, grad_smem, stream>>>(p, b, ch);
  return launch_status("gdn_chunk_bwd_grad_kernel", shape, stream);
}

}  // namespace

bool gdn_chunked_backward_takes(int64_t dk) { return dk == 16 || dk == 32 || dk == 64 || dk == 128; }

size_t gdn_chunked_backward_floats(const GdnBackwardParams& p) {
  return gdn_chunked_backward_takes(p.dk) ? static_cast<size_t>(scratch_floats(p)) : 0;
}

size_t gdn_chunked_backward_kept_floats(const GdnBackwardParams& p) { return static_cast<size_t>(kept_of(p).total); }

size_t gdn_chunked_backward_smem_bytes(int64_t dk) {
  switch (dk) {
    case 16: return smem_bytes<16>();
    case 32: return smem_bytes<32>();
    case 64: return smem_bytes<64>();
    case 128: return smem_bytes<128>();
    default: return 0;
  }
}

Status gdn_chunked_backward(const GdnBackwardParams& p, const GdnChunkedBackwardBuffers& b, cudaStream_t stream) {
  if (p.rows == 0 || p.tokens == 0) return {};
  if (p.rows > 65535 || p.v_heads > 65535 || max_chunks_of(p) > 65535 || p.dv > 65535 * int64_t{kBV})
    return invalid_argument("gdn_chunk_bwd kernels: too many rows, heads, chunks or columns (" + shape_of(p) + ")");
  switch (p.dk) {
    case 16: return launch<16>(p, b, stream);
    case 32: return launch<32>(p, b, stream);
    case 64: return launch<64>(p, b, stream);
    case 128: return launch<128>(p, b, stream);
    default: return invalid_argument("gdn_chunk_bwd kernels: dk must be 16, 32, 64 or 128 (" + shape_of(p) + ")");
  }
}

}  // namespace kiln::cuda
