// The chunked backward of the gated delta rule (gdn_chunked_backward.h): the two-pass forward
// keeps its records, the state entering each chunk and W; a reverse scan carries dS over the
// chunks (per row, value head and 32 state columns, as the forward scan); then one block per
// (row, chunk, value head) computes that chunk's gradients as block-wide products in shared
// memory, f32 throughout.
#include <cuda_pipeline.h>

#include <algorithm>
#include <string>

#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_chunk_record.h"
#include "backend/cuda/kernels/gdn_chunked_backward.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_tf32.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kC = kGdnChunk;
constexpr int kBV = 32;  // state columns a scan block owns; columns of a gradient-pass tile
constexpr int kThreads = 256;
constexpr int kWP = kBV + 1;  // row stride of a [rows][32] tile: a column read across lanes hits distinct banks
constexpr int kAL = kC + 1;   // row stride of a [64][64] matrix, likewise

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

// A tile of `rows` x 32 columns (row stride `stride`) from a row-major matrix at src whose rows
// are `ld` floats apart; rows from `valid` on and columns from `cols` on read as zero. Every
// thread of the block takes part.
__device__ __forceinline__ void load_tile(float* dst, const float* src, int64_t ld, int rows, int valid, int cols,
                                          int stride = kWP) {
  for (int e = threadIdx.x; e < rows * kBV; e += kThreads) {
    const int r = e / kBV, j = e % kBV;
    dst[r * stride + j] = r < valid && j < cols ? src[r * ld + j] : 0.f;
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
    load_record_rows<kThreads>(Qs, KT, rec + R.q(), DK);
    load_record_rows<kThreads>(Wks, KT, rec + R.wk(), DK);
    __pipeline_commit();
    load_tile(O, p.dout + c0 * p.dout_token_stride + h * p.dout_head_stride + j0, p.dout_token_stride, kC, n, bv,
              kSP);
    if (tid < kC) G[tid] = rec[R.g() + tid];
    __pipeline_wait_prior(1);  // Kn and Mq; Qn and Wk may still be in flight
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

// ---- The gradient pass: one block per (row, chunk, value head), all dv columns.

// acc[a][m] += sum_{k < K} A(r_a, k) B(k, c_m) over the block: thread (ty, tx) = (tid / 16,
// tid % 16) owns rows r_a = ty + 16 a and columns c_m = tx + 16 m.
template <int K, int RA, int CB, typename FA, typename FB>
__device__ __forceinline__ void block_product(float (&acc)[RA][CB], FA fa, FB fb) {
  const int ty = threadIdx.x >> 4, tx = threadIdx.x & 15;
#pragma unroll 4
  for (int k = 0; k < K; ++k) {
    float ra[RA], cb[CB];
#pragma unroll
    for (int a = 0; a < RA; ++a) ra[a] = fa(ty + 16 * a, k);
#pragma unroll
    for (int m = 0; m < CB; ++m) cb[m] = fb(k, tx + 16 * m);
#pragma unroll
    for (int a = 0; a < RA; ++a)
#pragma unroll
      for (int m = 0; m < CB; ++m) acc[a][m] += ra[a] * cb[m];
  }
}

// The sum over the 16 threads of a row (tx = lane % 16, one half-warp).
__device__ __forceinline__ float row_sum(float v) {
  for (int o = 8; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <int DK>
struct GradLayout {
  static constexpr int LD = DK + 1;           // rows of Q, K, Wk, Xw: a column read across lanes hits distinct banks
  static constexpr int kQ = 0;                // [kC][LD]
  static constexpr int kK = kQ + kC * LD;     // [kC][LD]
  static constexpr int kWk = kK + kC * LD;    // [kC][LD]
  static constexpr int kAe = kWk + kC * LD;   // [kC][kAL]: exp(G_t - G_i) k_t . k_i for i < t, else 0
  static constexpr int kE = kAe + kC * kAL;   // [kC][kAL]: dMq, E, then A, then F
  static constexpr int kT = kE + kC * kAL;    // tiles: S0, dSn [DK][kWP], W, dW, dout [kC][kWP];
                                              // then Xw [kC][LD] and dXu, U, V [kC][kWP] after it
  static constexpr int kTileFloats = std::max(2 * DK * kWP + 3 * kC * kWP, kC * LD + 3 * kC * kWP);
  static constexpr int kVec = kT + kTileFloats;  // G, beta, gamma, D, dG, dbeta [kC]; 32 for a block sum
  static constexpr int kFloats = kVec + 6 * kC + 32;
};

// Grid: (v_heads, max chunks, rows).
template <int DK>
__global__ void __launch_bounds__(kThreads, 1)
    gdn_chunk_bwd_grad_kernel(GdnBackwardParams p, GdnChunkedBackwardBuffers b, Chunks ch) {
  using L = GradLayout<DK>;
  constexpr int LD = L::LD, CB = DK / 16;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Qs = smem + L::kQ;
  float* Ks = smem + L::kK;
  float* Wks = smem + L::kWk;
  float* Ae = smem + L::kAe;
  float* Es = smem + L::kE;
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
  const int tid = threadIdx.x, ty = tid >> 4, tx = tid & 15;

  // 0. Q, K, Wk and the gates; Ae.
  for (int e = tid; e < kC * DK; e += kThreads) {
    const int t = e / DK, d = e % DK;
    Qs[t * LD + d] = rec[R.q() + e];
    Ks[t * LD + d] = rec[R.k() + e];
    Wks[t * LD + d] = rec[R.wk() + e];
  }
  if (tid < kC) {
    const int t = tid;
    G[t] = rec[R.g() + t];
    beta[t] = t < n ? b.beta[(c0 + t) * H + h] : 0.f;
    dG[t] = 0.f;
    dB[t] = 0.f;
  }
  __syncthreads();
  if (tid < kC) {
    gam[tid] = expf(G[tid]);
    D[tid] = expf(G[kC - 1] - G[tid]);
  }
  {
    float acc[4][4] = {};
    block_product<DK>(acc, [&](int r, int k) { return Ks[r * LD + k]; }, [&](int k, int i) { return Ks[i * LD + k]; });
#pragma unroll
    for (int a = 0; a < 4; ++a)
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int t = ty + 16 * a, i = tx + 16 * m;
        Ae[t * kAL + i] = i < t ? expf(G[t] - G[i]) * acc[a][m] : 0.f;
      }
  }

  // 1. Over tiles of 32 value columns: aq = dout S0^T, ak = W dSn^T, ay = dW S0^T (each [kC][DK]),
  //    am = dout W^T ([kC][kC]), sdot = <dSn, S0>.
  float aq[4][CB] = {}, ak[4][CB] = {}, ay[4][CB] = {}, am[4][4] = {};
  float sdot = 0.f;
  {
    float* S0t = Tl;
    float* dSt = S0t + DK * kWP;
    float* Wt = dSt + DK * kWP;
    float* dWt = Wt + kC * kWP;
    float* Ot = dWt + kC * kWP;
    for (int64_t j0 = 0; j0 < dv; j0 += kBV) {
      const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
      __syncthreads();  // the previous tile is consumed
      load_tile(S0t, S0g + j0, dv, DK, DK, bv);
      load_tile(dSt, dSg + j0, dv, DK, DK, bv);
      load_tile(Wt, Wg + j0, dv, kC, kC, bv);
      load_tile(dWt, dWg + j0, dv, kC, kC, bv);
      load_tile(Ot, p.dout + c0 * p.dout_token_stride + h * p.dout_head_stride + j0, p.dout_token_stride, kC, n, bv);
      __syncthreads();
      block_product<kBV>(aq, [&](int r, int k) { return Ot[r * kWP + k]; }, [&](int k, int d) { return S0t[d * kWP + k]; });
      block_product<kBV>(ak, [&](int r, int k) { return Wt[r * kWP + k]; }, [&](int k, int d) { return dSt[d * kWP + k]; });
      block_product<kBV>(ay, [&](int r, int k) { return dWt[r * kWP + k]; }, [&](int k, int d) { return S0t[d * kWP + k]; });
      block_product<kBV>(am, [&](int r, int k) { return Ot[r * kWP + k]; }, [&](int k, int i) { return Wt[i * kWP + k]; });
      for (int e = tid; e < DK * kBV; e += kThreads) {
        const int idx = (e / kBV) * kWP + e % kBV;
        sdot += S0t[idx] * dSt[idx];
      }
    }
  }
  sdot = block_sum(sdot, red);  // its barriers also end the tiles' use

  // dG from out (gamma_t Q_t . (dout S0^T)_t) and from S_next (D_t dD_t, dD_t = K_t . (W dSn^T)_t,
  // moved from position t to the last; exp(G_L) <dSn, S0> at the last); then aq = gamma (dout
  // S0^T) and ak = D (W dSn^T).
  {
    float last = 0.f;
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int t = ty + 16 * a;
      float rq = 0.f, rk = 0.f;
#pragma unroll
      for (int m = 0; m < CB; ++m) {
        const int d = tx + 16 * m;
        rq += Qs[t * LD + d] * aq[a][m];
        rk += Ks[t * LD + d] * ak[a][m];
      }
      rq = row_sum(rq);
      rk = row_sum(rk);
      if (tx == 0) atomicAdd(&dG[t], gam[t] * rq - D[t] * rk);
      last += D[t] * rk;
#pragma unroll
      for (int m = 0; m < CB; ++m) {
        aq[a][m] *= gam[t];  // dq's first term, gamma (dout S0^T)
        ak[a][m] *= D[t];    // dk's first term, D (W dSn^T)
      }
    }
    if (tx == 0) atomicAdd(&dG[kC - 1], last);
    if (tid == 0) atomicAdd(&dG[kC - 1], gam[kC - 1] * sdot);
  }
  float* Xw = Tl;  // [kC][LD]: -dW S0^T, then T^T of it
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int m = 0; m < CB; ++m) Xw[(ty + 16 * a) * LD + tx + 16 * m] = -ay[a][m];
#pragma unroll
  for (int a = 0; a < 4; ++a)
#pragma unroll
    for (int m = 0; m < 4; ++m) Es[(ty + 16 * a) * kAL + tx + 16 * m] = am[a][m];
  __syncthreads();

  // 2. P = dMq Mq: dG_t += sum_{i <= t} P[t, i] - sum_{s >= t} P[s, t]; then E in place, and
  //    aq += E K, ak += E^T Q.
  if (tid < kC) {
    const int t = tid;
    const float* M = rec + R.mq();
    float acc = 0.f;
    for (int i = 0; i < kC; ++i) {
      if (i <= t) acc += Es[t * kAL + i] * M[t * kC + i];
      if (i >= t) acc -= Es[i * kAL + t] * M[i * kC + t];
    }
    atomicAdd(&dG[t], acc);
  }
  __syncthreads();
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int t = e / kC, i = e % kC;
    Es[t * kAL + i] = i <= t ? Es[t * kAL + i] * expf(G[t] - G[i]) : 0.f;
  }
  __syncthreads();
  block_product<kC>(aq, [&](int r, int k) { return Es[r * kAL + k]; }, [&](int k, int d) { return Ks[k * LD + d]; });
  block_product<kC>(ak, [&](int r, int k) { return Es[k * kAL + r]; }, [&](int k, int d) { return Qs[k * LD + d]; });
  // dq is complete and dk's first terms are: both go out now, freeing their registers for the
  // back substitution (step 4 adds the rest of dk to what is stored).
  auto store_rows = [&](float* base, const float (&v)[4][CB], bool add) {
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int t = ty + 16 * a;
      if (t >= n) continue;
      float* o = base + ((c0 + t) * H + h) * DK;
#pragma unroll
      for (int m = 0; m < CB; ++m) o[tx + 16 * m] = add ? o[tx + 16 * m] + v[a][m] : v[a][m];
    }
  };
  store_rows(b.dqp, aq, false);
  store_rows(b.dkp, ak, false);
  __syncthreads();

  // 3. A = beta_t Ae into Es; then X = T^T Y by back substitution, a thread per column of
  //    [dW | -dW S0^T] (x_t -= sum_{s > t} A[s, t] x_s from the last row up): dXu over dW in the
  //    scratch, dv = beta dXu out, dXw in place in Xw.
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int t = e / kC, i = e % kC;
    Es[t * kAL + i] = beta[t] * Ae[t * kAL + i];
  }
  __syncthreads();
  for (int64_t col = tid; col < dv + DK; col += kThreads) {
    float x[kC];
    if (col < dv) {
#pragma unroll
      for (int t = 0; t < kC; ++t) x[t] = dWg[t * dv + col];
    } else {
#pragma unroll
      for (int t = 0; t < kC; ++t) x[t] = Xw[t * LD + (col - dv)];
    }
#pragma unroll
    for (int t = kC - 2; t >= 0; --t) {
      float v = x[t];
#pragma unroll
      for (int s = t + 1; s < kC; ++s) v -= Es[s * kAL + t] * x[s];
      x[t] = v;
    }
    if (col < dv) {
      float* dvo = p.dv_out + c0 * p.dv_token_stride + h * p.dv_head_stride + col;
#pragma unroll
      for (int t = 0; t < kC; ++t) {
        dWg[t * dv + col] = x[t];
        if (t < n) dvo[t * p.dv_token_stride] = beta[t] * x[t];
      }
    } else {
#pragma unroll
      for (int t = 0; t < kC; ++t) Xw[t * LD + (col - dv)] = x[t];
    }
  }
  __syncthreads();

  // 4. dA = -(dXu U^T + dXw Wk^T) below the diagonal (dbeta gathers V_t . dXu_t on the way);
  //    F = dA beta_t exp(G_t - G_i) into Es; the rest of dk: F K + F^T K + beta gamma dXw.
  float ad[4][4] = {};
  {
    float* dXut = Tl + kC * LD;
    float* Ut = dXut + kC * kWP;
    float* Vt = Ut + kC * kWP;
    for (int64_t j0 = 0; j0 < dv; j0 += kBV) {
      const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
      __syncthreads();  // the previous tile is consumed
      load_tile(dXut, dWg + j0, dv, kC, kC, bv);
      load_tile(Ut, rec + R.u() + j0, dv, kC, kC, bv);
      load_tile(Vt, p.v + c0 * p.v_token_stride + h * p.v_head_stride + j0, p.v_token_stride, kC, n, bv);
      __syncthreads();
      block_product<kBV>(ad, [&](int r, int k) { return dXut[r * kWP + k]; }, [&](int k, int i) { return Ut[i * kWP + k]; });
      if (tid < kC) {
        float s = 0.f;
        for (int j = 0; j < kBV; ++j) s += Vt[tid * kWP + j] * dXut[tid * kWP + j];
        dB[tid] += s;
      }
    }
  }
  block_product<DK>(ad, [&](int r, int k) { return Xw[r * LD + k]; }, [&](int k, int i) { return Wks[i * LD + k]; });
  __syncthreads();  // dB's plain updates above are done before the atomics below
  {
    float cg[4] = {};
#pragma unroll
    for (int a = 0; a < 4; ++a) {
      const int t = ty + 16 * a;
      float rb = 0.f, rg = 0.f;
#pragma unroll
      for (int m = 0; m < 4; ++m) {
        const int i = tx + 16 * m;
        float f = 0.f;
        if (i < t) {
          const float dA = -ad[a][m];
          rb += dA * Ae[t * kAL + i];
          const float qa = dA * Es[t * kAL + i];  // dA A
          rg += qa;
          cg[m] += qa;
          f = dA * beta[t] * expf(G[t] - G[i]);
        }
        Es[t * kAL + i] = f;  // each element read and written by its own thread
      }
      rb = row_sum(rb);
      rg = row_sum(rg);
      if (tx == 0) {
        atomicAdd(&dB[t], rb);
        atomicAdd(&dG[t], rg);
      }
    }
#pragma unroll
    for (int m = 0; m < 4; ++m) atomicAdd(&dG[tx + 16 * m], -cg[m]);
  }
  __syncthreads();
  float ak2[4][CB] = {};
  block_product<kC>(ak2, [&](int r, int k) { return Es[r * kAL + k]; }, [&](int k, int d) { return Ks[k * LD + d]; });
  block_product<kC>(ak2, [&](int r, int k) { return Es[k * kAL + r]; }, [&](int k, int d) { return Ks[k * LD + d]; });
#pragma unroll
  for (int a = 0; a < 4; ++a) {
    const int t = ty + 16 * a;
    float rk = 0.f;
#pragma unroll
    for (int m = 0; m < CB; ++m) {
      const int d = tx + 16 * m;
      const float xw = Xw[t * LD + d];
      ak2[a][m] += beta[t] * gam[t] * xw;
      rk += Ks[t * LD + d] * xw;
    }
    rk = row_sum(rk);
    if (tx == 0) {
      atomicAdd(&dB[t], gam[t] * rk);
      atomicAdd(&dG[t], beta[t] * gam[t] * rk);
    }
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
  store_rows(b.dkp, ak2, true);
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
  static const cudaError_t attr = [&] {
    cudaError_t e = cudaFuncSetAttribute(gdn_chunk_bwd_scan_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(scan_smem));
    if (e != cudaSuccess) return e;
    return cudaFuncSetAttribute(gdn_chunk_bwd_grad_kernel<DK>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                static_cast<int>(grad_smem));
  }();
  if (attr != cudaSuccess)
    return internal_error(std::string("gdn_chunk_bwd kernels: raising the shared-memory limit: ") + cudaGetErrorString(attr));
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
    f.q_token_stride = p.q_token_stride;
    f.q_head_stride = p.q_head_stride;
    f.k = p.k;
    f.k_token_stride = p.k_token_stride;
    f.k_head_stride = p.k_head_stride;
    f.v = p.v;
    f.v_token_stride = p.v_token_stride;
    f.v_head_stride = p.v_head_stride;
    f.a = p.a;
    f.a_stride = p.a_stride;
    f.b = p.b;
    f.b_stride = p.b_stride;
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
  gdn_chunk_bwd_grad_kernel<DK><<<grad_grid, kThreads, grad_smem, stream>>>(p, b, ch);
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
