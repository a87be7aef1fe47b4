// The gated delta rule in its chunked (WY/UT) form for prefill, chunks of 64 tokens, f32 state.
// Every column of the state evolves independently (docs/model.md, "The gated delta rule"), so a
// block owns one (value head, 32 state columns, row): 4 blocks per head at dv = 128, and the
// chunks of the row are taken in order. Per chunk, in shared memory:
//   K, Q  [64, dk]  normalised (q scaled by 1/sqrt(dk)); G = cumsum(g); beta
//   A[t, i]  = beta_t exp(G_t - G_i) (k_t . k_i), i < t      (masked before the exp)
//   Mq[t, i] = exp(G_t - G_i) (q_t . k_i), i <= t
//   W = (I + A)^-1 beta (v - exp(G) K S0)                      (forward substitution)
//   out = exp(G) Q S0 + Mq W;  S = exp(G_last) S0 + K^T (exp(G_last - G) W)
#include <cuda_pipeline.h>

#include <algorithm>

#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_chunk_record.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_tf32.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kC = 64;        // chunk
constexpr int kBV = 32;       // state columns per block
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kWP = kBV + 1;  // W row stride: the substitution reads W down a column

// kLean: A and Mq live in global memory (GatedDeltaRuleParams::chunk_am), not here: 91 KB instead
// of 123 KB at dk 128, which the GPUs with 99 KB of shared memory a block hold.
template <int DK, bool kLean = false>
struct ChunkLayout {
  static constexpr int kKP = DK + 4;  // K/Q row stride: float4 rows, staggered banks
  static constexpr int kS = 0;                       // [DK][kBV]
  static constexpr int kK = kS + DK * kBV;           // [kC][kKP]
  static constexpr int kQ = kK + kC * kKP;           // [kC][kKP]
  static constexpr int kA = kQ + kC * kKP;           // [kC][kC] (none when lean)
  static constexpr int kM = kA + (kLean ? 0 : kC * kC);  // [kC][kC] (none when lean)
  static constexpr int kW = kM + (kLean ? 0 : kC * kC);  // [kC][kWP]
  static constexpr int kG = kW + kC * kWP;           // [kC]
  static constexpr int kBeta = kG + kC;              // [kC]
  static constexpr int kFloats = kBeta + kC;
};

// Asynchronous 16-byte copies need 16-byte aligned q and k rows (v goes 4 bytes at a time).
__device__ __forceinline__ bool qk_rows_aligned(const GatedDeltaRuleParams& p) {
  return reinterpret_cast<uintptr_t>(p.q.ptr) % 16 == 0 && reinterpret_cast<uintptr_t>(p.k.ptr) % 16 == 0 &&
         p.q.token_stride % 4 == 0 && p.q.head_stride % 4 == 0 && p.k.token_stride % 4 == 0 &&
         p.k.head_stride % 4 == 0;
}

// Loads a chunk's q and k rows (row stride KP; zero rows from n on) and its gates (G holds g
// until the cumulative sum), waits for every asynchronous copy this thread issued (the caller may
// have issued its own before), then l2-normalises the rows in place (q scaled by 1/sqrt(dk)) and
// turns G into cumsum(g). Rows past the row's end have g = 0 and beta = 0: they contribute
// nothing. Every thread of the block calls it; it ends with a barrier.
template <int DK>
__device__ void load_chunk_qk(const GatedDeltaRuleParams& p, int64_t c0, int n, int64_t h, int64_t kh, bool vec,
                              float* Qs, float* Ks, float* G, float* beta) {
  constexpr int KP = DK + 4, kQuads = DK / 4;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  for (int e = tid; e < kC * kQuads; e += kThreads) {
    const int t = e / kQuads, d = 4 * (e % kQuads);
    float* qd = Qs + t * KP + d;
    float* kd = Ks + t * KP + d;
    if (t < n) {
      const float* qg = p.q.at(c0 + t, kh) + d;
      const float* kg = p.k.at(c0 + t, kh) + d;
      if (vec) {
        __pipeline_memcpy_async(qd, qg, 16);
        __pipeline_memcpy_async(kd, kg, 16);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          qd[i] = qg[i];
          kd[i] = kg[i];
        }
      }
    } else {
      *reinterpret_cast<float4*>(qd) = make_float4(0.f, 0.f, 0.f, 0.f);
      *reinterpret_cast<float4*>(kd) = make_float4(0.f, 0.f, 0.f, 0.f);
    }
  }
  if (tid < kC) {
    const int t = tid;
    float g = 0.f, b = 0.f;
    if (t < n) {
      const float x = p.a.row(c0 + t)[h] + p.dt_bias[h];
      const float softplus = x > 20.f ? x : log1pf(expf(x));
      g = -expf(p.a_log[h]) * softplus;
      b = 1.f / (1.f + expf(-p.b.row(c0 + t)[h]));
    }
    G[t] = g;
    beta[t] = b;
  }
  __pipeline_commit();
  __pipeline_wait_prior(0);
  __syncthreads();
  const float q_scale = 1.f / sqrtf(static_cast<float>(DK));
  constexpr int kPer = (DK + 31) / 32;
  for (int t = warp; t < n; t += kWarps) {
    float* qd = Qs + t * KP;
    float* kd = Ks + t * KP;
    float qq = 0.f, kk = 0.f;
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < DK) {
        qq += qd[d] * qd[d];
        kk += kd[d] * kd[d];
      }
    }
    qq = warp_sum(qq);
    kk = warp_sum(kk);
    const float qi = q_scale / sqrtf(qq + 1e-6f), ki = 1.f / sqrtf(kk + 1e-6f);
#pragma unroll
    for (int i = 0; i < kPer; ++i) {
      const int d = lane + 32 * i;
      if (d < DK) {
        qd[d] *= qi;
        kd[d] *= ki;
      }
    }
  }
  static_assert(kC == 64, "the cumulative sum takes two entries a lane");
  if (warp == 0) {
    const float g0 = G[2 * lane], g1 = G[2 * lane + 1];
    float s = g0 + g1;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const float y = __shfl_up_sync(0xffffffffu, s, o);
      if (lane >= o) s += y;
    }
    const float before = s - (g0 + g1);
    G[2 * lane] = before + g0;
    G[2 * lane + 1] = before + g0 + g1;
  }
  __syncthreads();
}

// A[t, i] = beta_t exp(G_t - G_i) (k_t . k_i) for i < t into A (row stride `ap`, shared memory),
// Mq[t, i] = exp(G_t - G_i) (q_t . k_i) for i <= t into Mq (row stride kC, shared or global);
// zeros elsewhere. Products on tensor cores (P: warp_mma's passes): warp w takes rows 16 (w % 4)
// .. + 15 and columns 32 (w / 4) .. + 31 (a tile wholly above the diagonal is only zeros).
template <int DK, int P>
__device__ void chunk_products(const float* Qs, const float* Ks, const float* G, const float* beta, float* A, int ap,
                               float* Mq) {
  constexpr int KP = DK + 4;  // 4 mod 32: the row-major fragments of Qs and Ks hit 32 banks
  const int warp = threadIdx.x >> 5, r0 = 16 * (warp & 3), n0 = 32 * (warp >> 2);
  float kk[4][4] = {}, qk[4][4] = {};
  if (n0 <= r0 + 15) {
    auto k_col = [&](int d, int i) { return Ks[(n0 + i) * KP + d]; };
    warp_mma<P>(kk, 0, DK, [&](int r, int d) { return Ks[(r0 + r) * KP + d]; }, k_col);
    warp_mma<P>(qk, 0, DK, [&](int r, int d) { return Qs[(r0 + r) * KP + d]; }, k_col);
  }
  warp_tile_each(kk, [&](int r, int c, float v) {
    const int t = r0 + r, i = n0 + c;
    A[t * ap + i] = i < t ? beta[t] * expf(G[t] - G[i]) * v : 0.f;  // gaps G_t - G_i <= 0 only
  });
  warp_tile_each(qk, [&](int r, int c, float v) {
    const int t = r0 + r, i = n0 + c;
    Mq[t * kC + i] = i <= t ? expf(G[t] - G[i]) * v : 0.f;
  });
}

// Grid: (v_heads, ceil(dv / 32), rows).
template <int DK, bool kLean>
__global__ void __launch_bounds__(kThreads, 1) gdn_chunked_kernel(GatedDeltaRuleParams p) {
  using L = ChunkLayout<DK, kLean>;
  constexpr int KP = L::kKP;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* S = smem + L::kS;
  float* Ks = smem + L::kK;
  float* Qs = smem + L::kQ;
  float* A = smem + L::kA;
  float* Mq = smem + L::kM;
  if constexpr (kLean) {  // the block's own A and Mq; __syncthreads orders global writes as shared ones
    const int64_t block = (static_cast<int64_t>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
    A = p.chunk_am + block * 2 * kC * kC;
    Mq = A + kC * kC;
  }
  float* W = smem + L::kW;
  float* G = smem + L::kG;
  float* beta = smem + L::kBeta;

  const int h = blockIdx.x, row = blockIdx.z;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots) return;
  const int64_t dv = p.dv, j0 = static_cast<int64_t>(blockIdx.y) * kBV;
  const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
  const int64_t kh = h / (p.v_heads / p.k_heads);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  float* S_glob = p.state + (slot * p.v_heads + h) * DK * dv + j0;
  for (int e = tid; e < DK * kBV; e += kThreads) {
    const int d = e / kBV, j = e % kBV;
    S[e] = j < bv ? S_glob[d * dv + j] : 0.f;
  }
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  const bool vec = qk_rows_aligned(p);

  for (int64_t c0 = t0; c0 < t1; c0 += kC) {
    const int n = t1 - c0 < kC ? static_cast<int>(t1 - c0) : kC;
    __syncthreads();  // the previous chunk is done with every buffer

    // 1. The block's v columns into W (the right-hand side from step 3 on), then q, k and gates.
    for (int e = tid; e < kC * kBV; e += kThreads) {
      const int t = e / kBV, j = e % kBV;
      if (t < n && j < bv) {
        const float* vg = p.v.at(c0 + t, h) + j0 + j;
        if (vec) __pipeline_memcpy_async(W + t * kWP + j, vg, 4);
        else W[t * kWP + j] = *vg;
      } else {
        W[t * kWP + j] = 0.f;
      }
    }
    load_chunk_qk<DK>(p, c0, n, h, kh, vec, Qs, Ks, G, beta);

    // 2. A and Mq.
    chunk_products<DK, 3>(Qs, Ks, G, beta, A, kC, Mq);

    // 3. K S0 and Q S0: thread (column j = lane, rows warp*8 .. warp*8+7); the right-hand side
    //    beta (v - exp(G) K S0) replaces v in W, exp(G) Q S0 starts the output.
    float o[8];
    {
      float ks[8], qs[8];
#pragma unroll
      for (int a = 0; a < 8; ++a) ks[a] = qs[a] = 0.f;
#pragma unroll 2
      for (int d = 0; d < DK; d += 4) {
        const float s0 = S[d * kBV + lane], s1 = S[(d + 1) * kBV + lane], s2 = S[(d + 2) * kBV + lane],
                    s3 = S[(d + 3) * kBV + lane];
#pragma unroll
        for (int a = 0; a < 8; ++a) {
          const int t = warp * 8 + a;
          const float4 k4 = *reinterpret_cast<const float4*>(Ks + t * KP + d);
          const float4 q4 = *reinterpret_cast<const float4*>(Qs + t * KP + d);
          ks[a] += k4.x * s0 + k4.y * s1 + k4.z * s2 + k4.w * s3;
          qs[a] += q4.x * s0 + q4.y * s1 + q4.z * s2 + q4.w * s3;
        }
      }
#pragma unroll
      for (int a = 0; a < 8; ++a) {
        const int t = warp * 8 + a;
        const float eg = expf(G[t]);
        W[t * kWP + lane] = beta[t] * (W[t * kWP + lane] - eg * ks[a]);
        o[a] = eg * qs[a];
      }
    }
    __syncthreads();

    // 4. Forward substitution W_t -= sum_{i<t} A[t, i] W_i: warp w owns columns 4w .. 4w+3,
    //    lanes split i; rows in order.
    for (int t = 1; t < n; ++t) {
      const float a0 = lane < t ? A[t * kC + lane] : 0.f;
      const float a1 = lane + 32 < t ? A[t * kC + lane + 32] : 0.f;
      float part[4];
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const int j = warp * 4 + c;
        part[c] = a0 * W[lane * kWP + j] + a1 * W[(lane + 32) * kWP + j];
      }
#pragma unroll
      for (int c = 0; c < 4; ++c) part[c] = warp_sum(part[c]);
      if (lane < 4) {
        const float mine = lane == 0 ? part[0] : lane == 1 ? part[1] : lane == 2 ? part[2] : part[3];
        W[t * kWP + warp * 4 + lane] -= mine;
      }
      __syncwarp();
    }
    __syncthreads();

    // 5. out = exp(G) Q S0 + Mq W, same thread layout as step 3.
    {
      const int last = warp * 8 + 7 < n - 1 ? warp * 8 + 7 : n - 1;
      for (int i = 0; i <= last; ++i) {
        const float w = W[i * kWP + lane];
#pragma unroll
        for (int a = 0; a < 8; ++a) o[a] += Mq[(warp * 8 + a) * kC + i] * w;
      }
      if (lane < bv) {
#pragma unroll
        for (int a = 0; a < 8; ++a) {
          const int t = warp * 8 + a;
          if (t < n) p.out.at(c0 + t, h)[j0 + lane] = o[a];
        }
      }
    }
    __syncthreads();  // W is rescaled next

    // 6. S = exp(G_last) S0 + K^T (exp(G_last - G) W): thread (column lane, rows warp*PD ..).
    const float glast = G[kC - 1];
    for (int e = tid; e < kC * kBV; e += kThreads) {
      const int t = e / kBV, j = e % kBV;
      W[t * kWP + j] *= expf(glast - G[t]);
    }
    __syncthreads();
    {
      constexpr int PD = DK / kWarps;
      const int d0 = warp * PD;
      const float el = expf(glast);
      float acc[PD];
#pragma unroll
      for (int m = 0; m < PD; ++m) acc[m] = el * S[(d0 + m) * kBV + lane];
      for (int t = 0; t < n; ++t) {
        const float w = W[t * kWP + lane];
        const float* kr = Ks + t * KP + d0;
        if constexpr (PD % 4 == 0) {
#pragma unroll
          for (int m = 0; m < PD; m += 4) {
            const float4 k4 = *reinterpret_cast<const float4*>(kr + m);
            acc[m] += k4.x * w;
            acc[m + 1] += k4.y * w;
            acc[m + 2] += k4.z * w;
            acc[m + 3] += k4.w * w;
          }
        } else {
#pragma unroll
          for (int m = 0; m < PD; ++m) acc[m] += kr[m] * w;
        }
      }
#pragma unroll
      for (int m = 0; m < PD; ++m) S[(d0 + m) * kBV + lane] = acc[m];
    }
  }
  __syncthreads();
  for (int e = tid; e < DK * kBV; e += kThreads) {
    const int d = e / kBV, j = e % kBV;
    if (j < bv) S_glob[d * dv + j] = S[e];
  }
}

// ---- The two-pass form (dk <= 128): everything that does not depend on the state is solved for
// all chunks at once (a record per chunk: gdn_chunk_record.h), leaving a scan of plain products
// over the chunks in order.

static_assert(kC == kGdnChunk, "the record's chunk");

// The slot of a row's state: its own index when every row starts from zero (p.zero_state), else
// p.state_slots[row]; -1 for a row to skip.
__device__ __forceinline__ int64_t state_slot(const GatedDeltaRuleParams& p, int row) {
  if (p.zero_state) return row;
  const int64_t slot = p.state_slots[row];
  return slot < 0 || slot >= p.slots ? -1 : slot;
}

constexpr int kPanel = 128;       // columns of U | Wk solved together by the first pass
constexpr int kXP = kPanel + 8;   // their row stride: a B fragment (8 mod 32)
constexpr int kAP = kC + 4;       // A's row stride there: a row-major A fragment (4 mod 32)
constexpr int kTP = 16 + 4;       // rows of the inverted 16 x 16 diagonal blocks of I + A, likewise

template <int DK>
struct PrepLayout {
  static constexpr int kKP = DK + 4;
  static constexpr int kK = 0;                                     // [kC][kKP]
  static constexpr int kQ = kK + kC * kKP;                         // [kC][kKP]; then X [kC][kXP]
  static constexpr int kA = kQ + std::max(kC * kKP, kC * kXP);     // [kC][kAP]
  static constexpr int kT = kA + kC * kAP;                         // [kC / 16][16][kTP]
  static constexpr int kG = kT + kC * kTP, kBeta = kG + kC;
  static constexpr int kFloats = kBeta + kC;
};

// Pass 1. Grid: (v_heads, max chunks of a row, rows). W = U - Wk S0 follows from
// W = (I + A)^-1 beta (v - exp(G) K S0): U = (I + A)^-1 beta V and Wk = (I + A)^-1 beta exp(G) K,
// solved by blocks of 16 rows, X_b = T_b (R_b - A[b, <b] X_<b) with T_b the inverse of I + A's
// diagonal block b, over panels of 128 columns. Each warp owns 16 columns of a panel, so the
// solve needs no block barrier; its products run on tensor cores in 3xTF32 (P = 3) or one tf32
// pass (P = 1, GatedDeltaRuleParams::tf32).
template <int DK, int P>
__global__ void __launch_bounds__(kThreads) gdn_chunk_prep_kernel(GatedDeltaRuleParams p) {
  using L = PrepLayout<DK>;
  constexpr int KP = L::kKP;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* Ks = smem + L::kK;
  float* Qs = smem + L::kQ;
  float* X = smem + L::kQ;  // once the products have read Qs
  float* A = smem + L::kA;
  float* T = smem + L::kT;
  float* G = smem + L::kG;
  float* beta = smem + L::kBeta;
  const int h = blockIdx.x, c = blockIdx.y, row = blockIdx.z;
  if (state_slot(p, row) < 0) return;
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1], c0 = t0 + static_cast<int64_t>(c) * kC;
  if (c0 >= t1) return;
  const int n = t1 - c0 < kC ? static_cast<int>(t1 - c0) : kC;
  const int64_t kh = h / (p.v_heads / p.k_heads), dv = p.dv;
  const int tid = threadIdx.x, warp = tid >> 5;
  const GdnChunkRecord R{DK, dv};
  float* rec = p.scratch + ((row * p.max_chunks + c) * p.v_heads + h) * R.floats();
  float* rQ = rec + R.q();
  float* rK = rec + R.k();
  float* rWk = rec + R.wk();
  float* rU = rec + R.u();
  float* rM = rec + R.mq();
  float* rG = rec + R.g();

  load_chunk_qk<DK>(p, c0, n, h, kh, qk_rows_aligned(p), Qs, Ks, G, beta);
  for (int e = tid; e < kC * (DK / 4); e += kThreads) {
    const int t = e / (DK / 4), d = 4 * (e % (DK / 4));
    reinterpret_cast<float4*>(rQ + t * DK)[d / 4] = *reinterpret_cast<const float4*>(Qs + t * KP + d);
    reinterpret_cast<float4*>(rK + t * DK)[d / 4] = *reinterpret_cast<const float4*>(Ks + t * KP + d);
  }
  if (tid < kC) rG[tid] = G[tid];
  chunk_products<DK, P>(Qs, Ks, G, beta, A, kAP, rM);
  __syncthreads();
  // T_b = (I + A_bb)^-1 by forward substitution, a thread per column of each diagonal block.
  if (tid < kC) {
    const int b = tid / 16, j = tid % 16;
    const float* Ab = A + 16 * b * kAP + 16 * b;
    float y[16];
#pragma unroll
    for (int r = 0; r < 16; ++r) {
      float v = r == j ? 1.f : 0.f;
#pragma unroll
      for (int i = 0; i < r; ++i) v -= Ab[r * kAP + i] * y[i];
      y[r] = v;
    }
#pragma unroll
    for (int r = 0; r < 16; ++r) T[(16 * b + r) * kTP + j] = y[r];
  }
  for (int64_t p0 = 0; p0 < dv + DK; p0 += kPanel) {
    __syncthreads();  // T is in, Qs is read; the previous panel is out
    // The right-hand sides: beta v for U's columns, beta exp(G) k for Wk's (zero past the end),
    // four adjacent columns a thread.
    for (int e = tid; e < kC * kPanel / 4; e += kThreads) {
      const int t = e / (kPanel / 4), cc = 4 * (e % (kPanel / 4));
      const float* vt = p.v.at(c0 + t, h);
      const float bt = beta[t], bg = bt * expf(G[t]);
      float4 x4;
      float* x = &x4.x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t col = p0 + cc + i;
        x[i] = 0.f;
        if (col < dv) {
          if (t < n) x[i] = bt * vt[col];
        } else if (col < dv + DK) {
          x[i] = bg * Ks[t * KP + (col - dv)];
        }
      }
      *reinterpret_cast<float4*>(X + t * kXP + cc) = x4;
    }
    __syncthreads();
    const int n0 = 16 * warp;  // the warp's columns of the panel
    static_assert(kPanel == 16 * kWarps, "a warp owns 16 columns of a panel");
    for (int r0 = 0; r0 < kC; r0 += 16) {
      float acc[2][4];
      warp_tile_each(acc, [&](int r, int j, float& v) { v = X[(r0 + r) * kXP + n0 + j]; });
      warp_mma<P>(acc, 0, r0, [&](int r, int i) { return -A[(r0 + r) * kAP + i]; },
                [&](int i, int j) { return X[i * kXP + n0 + j]; });
      warp_tile_each(acc, [&](int r, int j, float v) { X[(r0 + r) * kXP + n0 + j] = v; });
      __syncwarp();
      float sol[2][4] = {};
      warp_mma<P>(sol, 0, 16, [&](int r, int i) { return T[(r0 + r) * kTP + i]; },
                [&](int i, int j) { return X[(r0 + i) * kXP + n0 + j]; });
      __syncwarp();
      warp_tile_each(sol, [&](int r, int j, float v) { X[(r0 + r) * kXP + n0 + j] = v; });
      __syncwarp();
    }
    __syncthreads();
    for (int e = tid; e < kC * kPanel / 4; e += kThreads) {
      const int t = e / (kPanel / 4), cc = 4 * (e % (kPanel / 4));
      const float4 x4 = *reinterpret_cast<const float4*>(X + t * kXP + cc);
      const float* x = &x4.x;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int64_t col = p0 + cc + i;
        if (col < dv) rU[t * dv + col] = x[i];
        else if (col < dv + DK) rWk[t * DK + (col - dv)] = x[i];
      }
    }
  }
}

// The scan's strides (floats), chosen so that the tf32 fragments it reads hit 32 distinct banks:
// a row-major A fragment (rows g, columns q) needs a row stride of 4 mod 32, a transposed one
// (rows q, columns g) and a B fragment (rows q, columns g) 8 mod 32.
constexpr int kSP = kBV + 8;  // S, W and exp(G) Qn S0 rows: [.][kSP]
constexpr int kMP = kC + 4;   // Mq rows, read as a row-major A

template <int DK>
struct ScanLayout {
  static constexpr int kKP = DK + 4;             // Qn, Wk rows: row-major A
  static constexpr int kKT = DK + 8;             // Kn rows: transposed A
  static constexpr int kS = 0;                   // [DK][kSP]
  static constexpr int kQ = kS + DK * kSP;       // [kC][kKP]
  static constexpr int kK = kQ + kC * kKP;       // [kC][kKT]
  static constexpr int kWk = kK + kC * kKT;      // [kC][kKP]
  static constexpr int kM = kWk + kC * kKP;      // [kC][kMP]
  static constexpr int kW = kM + kC * kMP;       // [kC][kSP]
  static constexpr int kO = kW + kC * kSP;       // [kC][kSP]: exp(G) Qn S0
  static constexpr int kSh = kO + kC * kSP;      // [DK][kSP] x 2: S split into tf32 halves
  static constexpr int kWh = kSh + 2 * DK * kSP; // [kC][kSP] x 2: W, then exp(G_last - G) W, likewise
  static constexpr int kG = kWh + 2 * kC * kSP;  // [kC]
  static constexpr int kFloats = kG + kC;
};

// Pass 2. Grid: (v_heads, ceil(dv / 32), rows); per chunk, in order:
//   W = U - Wk S0;  out = exp(G) Qn S0 + Mq W;  S = exp(G_last) S0 + Kn^T (exp(G_last - G) W),
// each a warp-tiled product on tensor cores (mma_tf32.cuh): 3xTF32 (P = 3) or one tf32 pass (P = 1).
template <int DK, int P>
__global__ void __launch_bounds__(kThreads, 1) gdn_chunk_scan_kernel(GatedDeltaRuleParams p) {
  using L = ScanLayout<DK>;
  constexpr int KP = L::kKP, KT = L::kKT;
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  float* S = smem + L::kS;
  float* Qs = smem + L::kQ;
  float* Ks = smem + L::kK;
  float* Wks = smem + L::kWk;
  float* Mq = smem + L::kM;
  float* W = smem + L::kW;
  float* Os = smem + L::kO;
  uint32_t* Sh = reinterpret_cast<uint32_t*>(smem + L::kSh);
  uint32_t* Sl = Sh + DK * kSP;
  uint32_t* Wh = reinterpret_cast<uint32_t*>(smem + L::kWh);
  uint32_t* Wl = Wh + kC * kSP;
  float* G = smem + L::kG;
  const int h = blockIdx.x, row = blockIdx.z;
  const int64_t slot = state_slot(p, row);
  if (slot < 0) return;
  const int64_t dv = p.dv, j0 = static_cast<int64_t>(blockIdx.y) * kBV;
  const int bv = dv - j0 < kBV ? static_cast<int>(dv - j0) : kBV;
  const int tid = threadIdx.x, warp = tid >> 5;

  float* S_glob = p.zero_state ? nullptr : p.state + (slot * p.v_heads + h) * DK * dv + j0;
  for (int e = tid; e < DK * kBV; e += kThreads) {
    const int d = e / kBV, j = e % kBV;
    const float x = j < bv && S_glob != nullptr ? S_glob[d * dv + j] : 0.f;
    S[d * kSP + j] = x;
    store_split(x, Sh, Sl, d * kSP + j);
  }
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  const GdnChunkRecord R{DK, dv};
  auto record = [&](int c) { return p.scratch + ((row * p.max_chunks + c) * p.v_heads + h) * R.floats(); };
  auto exists = [&](int c) { return t0 + static_cast<int64_t>(c) * kC < t1; };
  // The record loads run ahead of the arithmetic in cp.async groups, each into a buffer as soon as
  // its last reader of the previous chunk is done: Qn and Wk after the W / exp(G) Qn S0 step, Mq
  // after the output, U, G and Kn at the top of the chunk (Kn waited for only before the state
  // update). A group is committed even when empty (no next chunk), so every wait counts alike.
  auto load_qwk = [&](int c) {
    if (exists(c)) {
      load_record_rows<kThreads>(Qs, KP, record(c) + R.q(), DK);
      load_record_rows<kThreads>(Wks, KP, record(c) + R.wk(), DK);
    }
    __pipeline_commit();
  };
  auto load_m = [&](int c) {
    if (exists(c)) load_record_rows<kThreads>(Mq, kMP, record(c) + R.mq(), kC);
    __pipeline_commit();
  };
  load_qwk(0);
  load_m(0);
  for (int c = 0; exists(c); ++c) {
    const int64_t c0 = t0 + static_cast<int64_t>(c) * kC;
    const int n = t1 - c0 < kC ? static_cast<int>(t1 - c0) : kC;
    const int n8 = (n + 7) & ~7;  // rows from n on are zero in every record
    const int64_t item = (row * p.max_chunks + c) * p.v_heads + h;
    const float* rec = record(c);
    const float* rU = rec + R.u();
    const float* rG = rec + R.g();
    __syncthreads();  // the previous chunk is done with W, G and Kn
    if (p.chunk_states != nullptr) {  // the state entering the chunk, for a backward
      float* kept = p.chunk_states + item * DK * dv + j0;
      for (int e = tid; e < DK * kBV; e += kThreads) {
        const int d = e / kBV, j = e % kBV;
        if (j < bv) kept[d * dv + j] = S[d * kSP + j];
      }
    }
    for (int e = tid; e < kC * kBV; e += kThreads) {
      const int t = e / kBV, j = e % kBV;
      if (j < bv) __pipeline_memcpy_async(W + t * kSP + j, rU + t * dv + j0 + j, 4);
      else W[t * kSP + j] = 0.f;
    }
    if (tid < kC) G[tid] = rG[tid];
    __pipeline_commit();
    load_record_rows<kThreads>(Ks, KT, rec + R.k(), DK);
    __pipeline_commit();
    __pipeline_wait_prior(1);  // all but Kn
    __syncthreads();

    // W = U - Wk S0 (warps 0-3) and exp(G) Qn S0 (warps 4-7, into Os, when there is an output):
    // rows 16 (warp % 4) .. + 15 of all 32 columns a warp.
    if (warp < 4 || p.out.ptr != nullptr) {
      const int r0 = 16 * (warp & 3);
      const float* A = warp < 4 ? Wks : Qs;
      float acc[4][4] = {};
      warp_mma<P>(acc, 0, DK, [&](int r, int k) { return A[(r0 + r) * KP + k]; },
                [&](int k, int j) { return Tf32Pair{Sh[k * kSP + j], Sl[k * kSP + j]}; });
      warp_tile_each(acc, [&](int r, int j, float v) {
        const int t = r0 + r;
        if (warp < 4) {
          const float w = W[t * kSP + j] - v;
          W[t * kSP + j] = w;
          store_split(w, Wh, Wl, t * kSP + j);
          if (p.chunk_w != nullptr && j < bv) p.chunk_w[(item * kC + t) * dv + j0 + j] = w;
        } else {
          Os[t * kSP + j] = expf(G[t]) * v;
        }
      });
    }
    __syncthreads();
    load_qwk(c + 1);  // Qn and Wk are done with
    // out = exp(G) Qn S0 + Mq W: rows 16 (warp / 2) .. + 15, columns 16 (warp % 2) .. + 15 a warp;
    // Mq is zero above the diagonal, so the sum stops at the tile's last row.
    if (p.out.ptr != nullptr) {
      const int r0 = 16 * (warp >> 1), n0 = 16 * (warp & 1);
      float acc[2][4];
      warp_tile_each(acc, [&](int r, int j, float& v) { v = Os[(r0 + r) * kSP + n0 + j]; });
      warp_mma<P>(acc, 0, r0 + 16 < n8 ? r0 + 16 : n8, [&](int r, int i) { return Mq[(r0 + r) * kMP + i]; },
                [&](int i, int j) { return Tf32Pair{Wh[i * kSP + n0 + j], Wl[i * kSP + n0 + j]}; });
      warp_tile_each(acc, [&](int r, int j, float v) {
        const int t = r0 + r;
        if (t < n && n0 + j < bv) p.out.at(c0 + t, h)[j0 + n0 + j] = v;
      });
    }
    __syncthreads();
    load_m(c + 1);  // Mq is done with
    // S = exp(G_last) S0 + Kn^T (exp(G_last - G) W).
    const float glast = G[kC - 1];
    for (int e = tid; e < kC * kBV; e += kThreads) {
      const int t = e / kBV, j = e % kBV;
      store_split(W[t * kSP + j] * expf(glast - G[t]), Wh, Wl, t * kSP + j);
    }
    __pipeline_wait_prior(2);  // Kn (the next chunk's Qn, Wk and Mq may still be in flight)
    __syncthreads();
    block_update_32<DK, kSP>(S, Sh, Sl, expf(glast), [&](auto& acc, int d0, int n0) {
      warp_mma<P>(acc, 0, n8, [&](int r, int t) { return Ks[t * KT + d0 + r]; },
                [&](int t, int j) { return Tf32Pair{Wh[t * kSP + n0 + j], Wl[t * kSP + n0 + j]}; });
    });
  }
  if (S_glob == nullptr) return;
  __syncthreads();
  for (int e = tid; e < DK * kBV; e += kThreads) {
    const int d = e / kBV, j = e % kBV;
    if (j < bv) S_glob[d * dv + j] = S[d * kSP + j];
  }
}

template <int DK, int P>
Status launch_two_pass(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  const size_t prep = PrepLayout<DK>::kFloats * sizeof(float), scan = ScanLayout<DK>::kFloats * sizeof(float);
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunk_prep_kernel<DK, P>),
                                           static_cast<int64_t>(prep), "gdn_chunk_prep_kernel"));
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunk_scan_kernel<DK, P>),
                                           static_cast<int64_t>(scan), "gdn_chunk_scan_kernel"));
  dim3 prep_grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>(p.max_chunks), static_cast<unsigned>(p.rows));
  gdn_chunk_prep_kernel<DK, P><<<prep_grid, kThreads, prep, stream>>>(p);
  KILN_RETURN_IF_ERROR(launch_status("gdn_chunk_prep_kernel", "", stream));
  dim3 grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>((p.dv + kBV - 1) / kBV),
            static_cast<unsigned>(p.rows));
  gdn_chunk_scan_kernel<DK, P><<<grid, kThreads, scan, stream>>>(p);
  return {};
}

// The two passes with their products in one tf32 pass where p.tf32 allows it, else in 3xTF32.
template <int DK>
Status launch_two_pass(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  return p.tf32 ? launch_two_pass<DK, 1>(p, stream) : launch_two_pass<DK, 3>(p, stream);
}

template <int DK, bool kLean>
Status launch_chunked(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  const size_t smem = ChunkLayout<DK, kLean>::kFloats * sizeof(float);
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_chunked_kernel<DK, kLean>),
                                           static_cast<int64_t>(smem), "gdn_chunked_kernel"));
  dim3 grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>((p.dv + kBV - 1) / kBV),
            static_cast<unsigned>(p.rows));
  gdn_chunked_kernel<DK, kLean><<<grid, kThreads, smem, stream>>>(p);
  return {};
}

template <int DK>
Status launch_chunked(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  return p.chunk_am != nullptr ? launch_chunked<DK, true>(p, stream) : launch_chunked<DK, false>(p, stream);
}

}  // namespace

size_t gated_delta_rule_chunked_smem_bytes(int64_t dk) {
  switch (dk) {
    case 16: return ChunkLayout<16>::kFloats * sizeof(float);
    case 32: return ChunkLayout<32>::kFloats * sizeof(float);
    case 64: return ChunkLayout<64>::kFloats * sizeof(float);
    case 128: return ChunkLayout<128>::kFloats * sizeof(float);
    case 256: return ChunkLayout<256>::kFloats * sizeof(float);
    default: return 0;
  }
}

size_t gated_delta_rule_chunked_lean_smem_bytes(int64_t dk) {
  switch (dk) {
    case 16: return ChunkLayout<16, true>::kFloats * sizeof(float);
    case 32: return ChunkLayout<32, true>::kFloats * sizeof(float);
    case 64: return ChunkLayout<64, true>::kFloats * sizeof(float);
    case 128: return ChunkLayout<128, true>::kFloats * sizeof(float);
    case 256: return ChunkLayout<256, true>::kFloats * sizeof(float);
    default: return 0;
  }
}

size_t gated_delta_rule_chunked_lean_floats(int64_t rows, int64_t v_heads, int64_t dv) {
  return static_cast<size_t>(rows * v_heads * ((dv + kBV - 1) / kBV) * 2 * kC * kC);
}

size_t gated_delta_rule_two_pass_scratch_floats(int64_t rows, int64_t max_chunks, int64_t v_heads, int64_t dk,
                                                int64_t dv) {
  if (dk != 16 && dk != 32 && dk != 64 && dk != 128) return 0;
  return static_cast<size_t>(rows * max_chunks * v_heads * GdnChunkRecord{dk, dv}.floats());
}

size_t gated_delta_rule_two_pass_smem_bytes(int64_t dk) {
  switch (dk) {
    case 16: return std::max(PrepLayout<16>::kFloats, ScanLayout<16>::kFloats) * sizeof(float);
    case 32: return std::max(PrepLayout<32>::kFloats, ScanLayout<32>::kFloats) * sizeof(float);
    case 64: return std::max(PrepLayout<64>::kFloats, ScanLayout<64>::kFloats) * sizeof(float);
    case 128: return std::max(PrepLayout<128>::kFloats, ScanLayout<128>::kFloats) * sizeof(float);
    default: return 0;
  }
}

Status gated_delta_rule_chunked(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " k_heads=" +
           std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) +
           " dv=" + std::to_string(p.dv);
  };
  if (p.rows == 0 || p.tokens == 0) return {};
  if (p.rows > 65535 || p.v_heads > 0x7fffffff || p.dv > 65535 * int64_t{kBV})
    return invalid_argument("gdn_chunked_kernel: too many rows, heads or columns (" + shape() + ")");
  if (p.scratch != nullptr) {
    if (p.max_chunks < 1 || p.max_chunks > 65535)
      return invalid_argument("gdn_chunk_kernels: max_chunks out of range (" + shape() + ")");
    switch (p.dk) {
      case 16: KILN_RETURN_IF_ERROR(launch_two_pass<16>(p, stream)); break;
      case 32: KILN_RETURN_IF_ERROR(launch_two_pass<32>(p, stream)); break;
      case 64: KILN_RETURN_IF_ERROR(launch_two_pass<64>(p, stream)); break;
      case 128: KILN_RETURN_IF_ERROR(launch_two_pass<128>(p, stream)); break;
      default: return invalid_argument("gdn_chunk_kernels: dk must be 16, 32, 64 or 128 (" + shape() + ")");
    }
    return launch_status("gdn_chunk_scan_kernel", shape, stream);
  }
  switch (p.dk) {
    case 16: KILN_RETURN_IF_ERROR(launch_chunked<16>(p, stream)); break;
    case 32: KILN_RETURN_IF_ERROR(launch_chunked<32>(p, stream)); break;
    case 64: KILN_RETURN_IF_ERROR(launch_chunked<64>(p, stream)); break;
    case 128: KILN_RETURN_IF_ERROR(launch_chunked<128>(p, stream)); break;
    case 256: KILN_RETURN_IF_ERROR(launch_chunked<256>(p, stream)); break;
    default: return invalid_argument("gdn_chunked_kernel: dk must be 16, 32, 64, 128 or 256 (" + shape() + ")");
  }
  return launch_status("gdn_chunked_kernel", shape, stream);
}

}  // namespace kiln::cuda
