// The gated delta rule's backward (gdn_backward.h): the arithmetic of the CPU reference
// (cpu/training_gdn.cc, delta_rule_backward) per value column, with the sums over columns done by
// the block. For token t with P = S_{t-1}, S' = e^g P, r = v - S'^T k, u = beta r, S_t = S' + k u^T,
// o = S_t^T q, carrying dS = dL/dS_t backwards:
//   dS += q do^T;  du = dS^T k;  w = beta du (= dv);  dbeta = du . r
//   dq = e^g P do + k (u . do);  dk = dS u - e^g P w           (before dS changes below)
//   dS' = dS - k w^T;  dg = e^g sum(dS' * P);  dS_{t-1} = e^g dS'
#include <algorithm>
#include <cmath>
#include <mutex>
#include <string>

#include "backend/cuda/kernels/gdn_backward.h"
#include "backend/cuda/kernels/gdn_chunked_backward.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kPairWarps = 4;  // (token, key head) pairs per block of the prep and finish kernels
constexpr int kPerLane = kGdnBackwardMaxDk / 32;
// The register kernel: 8 lanes per value column (each holding rows slice, slice + 8, ... of the
// column's state and dS), 4 columns a warp, 32 a block; chunks recomputed kSubChunk tokens at a time.
constexpr int kRegThreads = 256;
constexpr int kRegWarps = kRegThreads / 32;
constexpr int kRegCols = kRegThreads / 8;
constexpr int kSubChunk = 8;

// Where the scratch's parts start (floats), for a planned call.
struct ScratchLayout {
  int64_t qn = 0, kn = 0, decay = 0, beta = 0, dqp = 0, dkp = 0, dgp = 0, dbp = 0, state = 0;
  int64_t max_chunks = 0, per_block = 0, total = 0;
};

ScratchLayout scratch_layout(const GdnBackwardParams& p) {
  ScratchLayout s;
  const int64_t T = p.tokens, qk = T * p.k_heads * p.dk, gates = T * p.v_heads, parts = T * p.v_heads * p.groups;
  s.qn = 0;
  s.kn = s.qn + qk;
  s.decay = s.kn + qk;
  s.beta = s.decay + gates;
  s.dqp = s.beta + gates;
  s.dkp = s.dqp + parts * p.dk;
  s.dgp = s.dkp + parts * p.dk;
  s.dbp = s.dgp + parts;
  s.state = (s.dbp + parts + 3) / 4 * 4;  // 16-byte aligned: the chunked form copies its records in float4s
  s.max_chunks = (p.max_len + p.chunk - 1) / p.chunk;
  if (p.kernel == GdnBackwardKernel::kChunked) {
    s.total = s.state + static_cast<int64_t>(gdn_chunked_backward_floats(p));
    return s;
  }
  // The register walk: chunk boundaries, one chunk's sub-chunk boundaries and one sub-chunk's
  // per-token states, each a state of kRegThreads x rows_per_lane floats (lane-major, so every
  // access is coalesced).
  const int64_t state = kRegThreads * p.rows_per_lane;
  s.per_block = (s.max_chunks + (p.chunk + kSubChunk - 1) / kSubChunk + kSubChunk) * state;
  s.total = s.state + p.state_blocks * s.per_block;
  return s;
}

// The scratch's parts as pointers, for the kernels.
struct Scratch {
  float *qn, *kn;      // [tokens, k_heads, dk]: normalised q (scaled) and k
  float *decay, *beta; // [tokens, v_heads]: exp(g), sigmoid(b)
  float *dqp, *dkp;    // [tokens, v_heads, groups, dk]: partial gradients of the normalised q, k
  float *dgp, *dbp;    // [tokens, v_heads, groups]: partial dg, dbeta
  float* state;        // [state_blocks, per_block]: [max_chunks, dk, cols] boundaries, [chunk, dk, cols] states;
                       // the chunked form: its buffers (gdn_chunked_backward_floats)
  int64_t per_block;
};

Scratch scratch_of(const GdnBackwardParams& p) {
  const ScratchLayout l = scratch_layout(p);
  float* b = p.scratch;
  return {b + l.qn, b + l.kn, b + l.decay, b + l.beta, b + l.dqp, b + l.dkp, b + l.dgp, b + l.dbp, b + l.state,
          l.per_block};
}

__device__ __forceinline__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// One warp per (token, key head): normalise q and k as the forward does (y = x scale / sqrt(|x|^2 +
// 1e-6)), and the gates of the value heads reading this key head.
__global__ void __launch_bounds__(kPairWarps * 32) gdn_backward_prep_kernel(GdnBackwardParams p, Scratch s) {
  const int lane = threadIdx.x & 31;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kPairWarps + (threadIdx.x >> 5);
  if (pair >= p.tokens * p.k_heads) return;  // the whole warp: no block barrier follows
  const int64_t t = pair / p.k_heads, kh = pair % p.k_heads, dk = p.dk, ratio = p.v_heads / p.k_heads;
  const float* q = p.q.at(t, kh);
  const float* k = p.k.at(t, kh);
  float qq = 0.f, kk = 0.f;
  for (int64_t i = lane; i < dk; i += 32) {
    qq += q[i] * q[i];
    kk += k[i] * k[i];
  }
  qq = warp_sum(qq);
  kk = warp_sum(kk);
  const float q_inv = (1.f / sqrtf(static_cast<float>(dk))) / sqrtf(qq + 1e-6f), k_inv = 1.f / sqrtf(kk + 1e-6f);
  float* qn = s.qn + pair * dk;
  float* kn = s.kn + pair * dk;
  for (int64_t i = lane; i < dk; i += 32) {
    qn[i] = q[i] * q_inv;
    kn[i] = k[i] * k_inv;
  }
  for (int64_t h = kh * ratio + lane; h < (kh + 1) * ratio; h += 32) {
    const float x = p.a.row(t)[h] + p.dt_bias[h];
    const float g = -expf(p.a_log[h]) * (x > 20.f ? x : log1pf(expf(x)));  // as the forward's softplus
    s.decay[t * p.v_heads + h] = expf(g);
    s.beta[t * p.v_heads + h] = sigmoidf(p.b.row(t)[h]);
  }
}

// ---- The register kernel. Lane (warp w, lane) owns column 4 w + lane / 8 of the block's group and
// its state rows i = slice + 8 m (slice = lane % 8, m < R), zero past dk; columns past dv read
// v = dout = 0, so their state and dS stay zero and add nothing to the sums over columns.

// Sum over the 8 lanes of a column; a butterfly, so every lane gets the same bits.
__device__ __forceinline__ float column_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  x += __shfl_xor_sync(0xffffffffu, x, 2);
  x += __shfl_xor_sync(0xffffffffu, x, 4);
  return x;
}

template <int R>
__device__ __forceinline__ void load_rows(float (&x)[R], const float* src, int slice, int dk) {
#pragma unroll
  for (int m = 0; m < R; ++m) x[m] = slice + 8 * m < dk ? src[slice + 8 * m] : 0.f;
}

// A state in the scratch: float m of every lane, lane-major.
template <int R>
__device__ __forceinline__ void store_state(const float (&P)[R], float* dst, int tid) {
#pragma unroll
  for (int m = 0; m < R; ++m) dst[m * kRegThreads + tid] = P[m];
}

template <int R>
__device__ __forceinline__ void load_state(float (&P)[R], const float* src, int tid) {
#pragma unroll
  for (int m = 0; m < R; ++m) P[m] = src[m * kRegThreads + tid];
}

// What a lane needs of one (row, value head, group) item, and the block's staging area: up to
// kSubChunk tokens' normalised k and q ([kSubChunk][8 R], zero past dk), decays and betas, and the
// group's v and dout ([kSubChunk][kRegCols], zero past dv), read from shared memory by the steps
// (one global round trip per kSubChunk tokens rather than per token).
struct RegItem {
  int64_t h, kh;
  int j0, nc, col, dk, slice, tid;
  bool active;
};

struct Stage {
  float *k, *q, *g, *beta, *v, *o;
};

// Loads `count` (<= kSubChunk) tokens from tok0 into the staging area; q and dout only `with_qo`.
// Block-uniform: its barriers keep the previous tokens' readers before the writes, and the writes
// before the new readers.
template <int R>
__device__ __forceinline__ void stage_tokens(const Stage& st, const GdnBackwardParams& p, const Scratch& s,
                                             const RegItem& it, int64_t tok0, int64_t count, bool with_qo) {
  constexpr int DKP = 8 * R;
  const int64_t Hk = p.k_heads, Hv = p.v_heads;
  __syncthreads();
  for (int idx = it.tid; idx < count * DKP; idx += kRegThreads) {
    const int l = idx / DKP, i = idx % DKP;
    const int64_t row = ((tok0 + l) * Hk + it.kh) * it.dk;
    st.k[idx] = i < it.dk ? s.kn[row + i] : 0.f;
    if (with_qo) st.q[idx] = i < it.dk ? s.qn[row + i] : 0.f;
  }
  for (int idx = it.tid; idx < count * kRegCols; idx += kRegThreads) {
    const int l = idx / kRegCols, c = idx % kRegCols;
    const int64_t tok = tok0 + l;
    const bool in = c < it.nc;
    st.v[idx] = in ? p.v.at(tok, it.h)[it.j0 + c] : 0.f;
    if (with_qo) st.o[idx] = in ? p.dout.at(tok, it.h)[it.j0 + c] : 0.f;
  }
  if (it.tid < count) {
    st.g[it.tid] = s.decay[(tok0 + it.tid) * Hv + it.h];
    st.beta[it.tid] = s.beta[(tok0 + it.tid) * Hv + it.h];
  }
  __syncthreads();
}

// P through tokens tok0, tok0 + 1, ...: stores the state entering tok0 + e every (e < nstore) at
// dst + e * state floats, P ending as the last one stored. Block-uniform. `prestaged`: the caller
// has staged the tokens (at most kSubChunk of them) already.
template <int R>
__device__ __forceinline__ void advance(float (&P)[R], const Stage& st, const GdnBackwardParams& p, const Scratch& s,
                                        const RegItem& it, int64_t tok0, int64_t every, int64_t nstore, float* dst,
                                        bool prestaged) {
  constexpr int DKP = 8 * R;
  const int64_t total = (nstore - 1) * every;  // tokens stepped
  int64_t stored = 0, left = 0;                // counters rather than l % every: no 64-bit division a token
  for (int64_t l = 0;; ++l) {
    if (left == 0) {
      store_state<R>(P, dst + stored * (kRegThreads * R), it.tid);
      ++stored;
      left = every;
    }
    if (l == total) break;
    --left;
    const int b = static_cast<int>(l % kSubChunk);
    if (b == 0 && !prestaged) stage_tokens<R>(st, p, s, it, tok0 + l, total - l < kSubChunk ? total - l : kSubChunk, false);
    const float* k = st.k + b * DKP + it.slice;
    const float eg = st.g[b], beta = st.beta[b], vj = st.v[b * kRegCols + it.col];
    float acc0 = 0.f, acc1 = 0.f;  // two chains: half the FMA latency a token
#pragma unroll
    for (int m = 0; m < R; m += 2) {
      acc0 += P[m] * k[8 * m];
      acc1 += P[m + 1] * k[8 * m + 8];
    }
    const float u = beta * (vj - eg * column_sum(acc0 + acc1));
#pragma unroll
    for (int m = 0; m < R; ++m) P[m] = eg * P[m] + k[8 * m] * u;
  }
}

// Shared memory: two buffers (alternate tokens, so one barrier a token suffices) of per-warp
// partial row sums [kRegWarps][2][8 R] (dk, dq) and per-warp scalars [kRegWarps][2] (dg, dbeta);
// then the staging area.
template <int R>
constexpr int reg_buffer_floats() {
  return kRegWarps * 2 * 8 * R + kRegWarps * 2;
}

template <int R>
constexpr int reg_smem_floats() {
  return 2 * reg_buffer_floats<R>() + kSubChunk * (2 * 8 * R + 2 + 2 * kRegCols);
}

template <int R>
__global__ void __launch_bounds__(kRegThreads, R <= 16 ? 2 : 1) gdn_backward_reg_kernel(GdnBackwardParams p, Scratch s) {
  extern __shared__ float smem[];
  constexpr int DKP = 8 * R, H1 = R, H2 = R / 2;
  static_assert(R >= 2, "the halving reduction takes at least 2 rows a lane");
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, slice = lane & 7;
  const int col = warp * 4 + (lane >> 3);
  const bool hi1 = (lane & 16) != 0, hi0 = (lane & 8) != 0;
  const int dk = static_cast<int>(p.dk);
  const int64_t C = p.chunk, Hv = p.v_heads, G = p.groups;
  const int64_t SP = static_cast<int64_t>(kRegThreads) * R;
  const int64_t max_chunks = (p.max_len + C - 1) / C, max_subs = (C + kSubChunk - 1) / kSubChunk;
  float* bounds = s.state + static_cast<int64_t>(blockIdx.x) * s.per_block;  // [max_chunks][SP]
  float* subs = bounds + max_chunks * SP;                                    // [max_subs][SP]
  float* states = subs + max_subs * SP;                                      // [kSubChunk][SP]
  Stage st;
  st.k = smem + 2 * reg_buffer_floats<R>();
  st.q = st.k + kSubChunk * DKP;
  st.g = st.q + kSubChunk * DKP;
  st.beta = st.g + kSubChunk;
  st.v = st.beta + kSubChunk;
  st.o = st.v + kSubChunk * kRegCols;
  const int64_t ratio = Hv / p.k_heads, items = p.rows * Hv * G;
  int buf = 0;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t grp = item % G, h = (item / G) % Hv, row = item / (G * Hv);
    const int64_t t0 = p.cu_seqlens[row], n = p.cu_seqlens[row + 1] - t0;
    const int j0 = static_cast<int>(grp * kRegCols), nc = min(kRegCols, static_cast<int>(p.dv) - j0);
    if (n <= 0) continue;  // block-uniform, as is every branch on the item
    if (n > p.max_len) {
      // NaN gradients rather than states past the scratch.
      for (int64_t tok = t0; tok < t0 + n && tok < p.tokens; ++tok) {
        const int64_t part = (tok * Hv + h) * G + grp;
        if (slice == 0 && col < nc) p.dv_out.at(tok, h)[j0 + col] = NAN;
        for (int i = tid; i < dk; i += kRegThreads) s.dqp[part * dk + i] = s.dkp[part * dk + i] = NAN;
        if (tid == 0) s.dgp[part] = s.dbp[part] = NAN;
      }
      continue;
    }
    RegItem it;
    it.h = h;
    it.kh = h / ratio;
    it.j0 = j0;
    it.nc = nc;
    it.col = col;
    it.dk = dk;
    it.slice = slice;
    it.tid = tid;
    it.active = col < nc;
    const int64_t chunks = (n + C - 1) / C;

    float P[R], dS[R];
#pragma unroll
    for (int m = 0; m < R; ++m) P[m] = dS[m] = 0.f;
    advance<R>(P, st, p, s, it, t0, C, chunks, bounds, false);

    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t tc = c * C, L = n - tc < C ? n - tc : C, nsub = (L + kSubChunk - 1) / kSubChunk;
      load_state<R>(P, bounds + c * SP, tid);
      advance<R>(P, st, p, s, it, t0 + tc, kSubChunk, nsub, subs, false);
      for (int64_t sc = nsub - 1; sc >= 0; --sc) {
        const int64_t ts = tc + sc * kSubChunk, LS = L - sc * kSubChunk < kSubChunk ? L - sc * kSubChunk : kSubChunk;
        stage_tokens<R>(st, p, s, it, t0 + ts, LS, true);
        load_state<R>(P, subs + sc * SP, tid);
        advance<R>(P, st, p, s, it, t0 + ts, 1, LS, states, true);  // P: the state entering the last token
        for (int64_t l = LS - 1; l >= 0; --l) {
          const int64_t tok = t0 + ts + l, part = (tok * Hv + h) * G + grp;
          const int b = static_cast<int>(l);
          const float* k = st.k + b * DKP + slice;
          const float* q = st.q + b * DKP + slice;
          const float eg = st.g[b], beta = st.beta[b], vj = st.v[b * kRegCols + col], oj = st.o[b * kRegCols + col];
          float acc0 = 0.f, acc1 = 0.f;
#pragma unroll
          for (int m = 0; m < R; m += 2) {
            acc0 += P[m] * k[8 * m];
            acc1 += P[m + 1] * k[8 * m + 8];
          }
          const float r = vj - eg * column_sum(acc0 + acc1), u = beta * r;
          float du0 = 0.f, du1 = 0.f;
#pragma unroll
          for (int m = 0; m < R; m += 2) {
            dS[m] += q[8 * m] * oj;
            dS[m + 1] += q[8 * m + 8] * oj;
            du0 += dS[m] * k[8 * m];
            du1 += dS[m + 1] * k[8 * m + 8];
          }
          const float du = column_sum(du0 + du1);
          const float w = beta * du;
          if (slice == 0 && it.active) p.dv_out.at(tok, h)[j0 + col] = w;
          // Per row of this column: dk's term dS u - e^g P w, dq's term (e^g P + k u) o (that is,
          // S_t o); then dS' = dS - k w^T, dg's term dS' . P, and dS_{t-1} = e^g dS'.
          float a[2 * R];
          float gp = 0.f;
          const float egw = eg * w, ego = eg * oj, uo = u * oj;
#pragma unroll
          for (int m = 0; m < R; ++m) {
            const float km = k[8 * m];
            a[m] = dS[m] * u - P[m] * egw;
            a[R + m] = P[m] * ego + km * uo;
            const float d = dS[m] - km * w;
            gp += d * P[m];
            dS[m] = eg * d;
          }
          // P is spent: fetch the previous token's state while the sums below run.
          if (l > 0) load_state<R>(P, states + (l - 1) * SP, tid);
          float bp = slice == 0 ? du * r : 0.f;
          // The row terms summed over the warp's 4 columns (lanes xor 8, 16) by halving: each
          // exchange hands over half the values and keeps the other half, summed.
#pragma unroll
          for (int v = 0; v < H1; ++v) {
            const float send = hi1 ? a[v] : a[v + H1], keep = hi1 ? a[v + H1] : a[v];
            a[v] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
          }
#pragma unroll
          for (int v = 0; v < H2; ++v) {
            const float send = hi0 ? a[v] : a[v + H2], keep = hi0 ? a[v + H2] : a[v];
            a[v] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
          }
          gp = warp_sum(gp);
          bp = warp_sum(bp);
          float* rows = smem + buf * reg_buffer_floats<R>();
          float* scal = rows + kRegWarps * 2 * DKP;
          const int base = (hi1 ? H1 : 0) + (hi0 ? H2 : 0);
#pragma unroll
          for (int v = 0; v < H2; ++v) {
            const int vi = base + v, which = vi >= R ? 1 : 0, m = vi - which * R;
            rows[(warp * 2 + which) * DKP + slice + 8 * m] = a[v];
          }
          if (lane == 0) {
            scal[warp * 2] = gp;
            scal[warp * 2 + 1] = bp;
          }
          __syncthreads();
          for (int idx = tid; idx < 2 * DKP; idx += kRegThreads) {
            const int which = idx / DKP, i = idx - which * DKP;
            if (i < dk) {
              float sum = 0.f;
#pragma unroll
              for (int ww = 0; ww < kRegWarps; ++ww) sum += rows[(ww * 2 + which) * DKP + i];
              (which == 0 ? s.dkp : s.dqp)[part * dk + i] = sum;
            }
          }
          if (tid == 0) {
            float g = 0.f, bsum = 0.f;
#pragma unroll
            for (int ww = 0; ww < kRegWarps; ++ww) {
              g += scal[ww * 2];
              bsum += scal[ww * 2 + 1];
            }
            s.dgp[part] = eg * g;
            s.dbp[part] = bsum;
          }
          buf ^= 1;
        }
      }
    }
  }
}

// One warp per (token, key head): sum the partials of the value heads and column groups reading
// the key head, then dx = (scale / N) (dy - x (x . dy) / N^2), N = sqrt(|x|^2 + 1e-6), for q
// (scale 1/sqrt(dk)) and k (scale 1); and da = dg * (-exp(a_log) sigmoid(a + dt_bias)),
// db = dbeta * beta (1 - beta) for those value heads.
__global__ void __launch_bounds__(kPairWarps * 32) gdn_backward_finish_kernel(GdnBackwardParams p, Scratch s) {
  const int lane = threadIdx.x & 31;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * kPairWarps + (threadIdx.x >> 5);
  if (pair >= p.tokens * p.k_heads) return;  // the whole warp: no block barrier follows
  const int64_t t = pair / p.k_heads, kh = pair % p.k_heads, dk = p.dk, ratio = p.v_heads / p.k_heads;
  const int64_t first = (t * p.v_heads + kh * ratio) * p.groups, count = ratio * p.groups;
  float sq[kPerLane], sk[kPerLane];
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    sq[m] = 0.f;
    sk[m] = 0.f;
    const int64_t i = lane + 32 * m;
    if (i < dk)
      for (int64_t e = first; e < first + count; ++e) {
        sq[m] += s.dqp[e * dk + i];
        sk[m] += s.dkp[e * dk + i];
      }
  }
  const float* q = p.q.at(t, kh);
  const float* k = p.k.at(t, kh);
  float qq = 0.f, qdy = 0.f, kk = 0.f, kdy = 0.f;
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int64_t i = lane + 32 * m;
    if (i < dk) {
      qq += q[i] * q[i];
      qdy += q[i] * sq[m];
      kk += k[i] * k[i];
      kdy += k[i] * sk[m];
    }
  }
  qq = warp_sum(qq);
  qdy = warp_sum(qdy);
  kk = warp_sum(kk);
  kdy = warp_sum(kdy);
  const float q_scale = 1.f / sqrtf(static_cast<float>(dk));
  const float qn2 = qq + 1e-6f, kn2 = kk + 1e-6f;
  const float qf = q_scale / sqrtf(qn2), qc = qdy / qn2, kf = 1.f / sqrtf(kn2), kc = kdy / kn2;
  float* dq = p.dq.at(t, kh);
  float* dkr = p.dk_out.at(t, kh);
#pragma unroll
  for (int m = 0; m < kPerLane; ++m) {
    const int64_t i = lane + 32 * m;
    if (i < dk) {
      dq[i] = qf * (sq[m] - q[i] * qc);
      dkr[i] = kf * (sk[m] - k[i] * kc);
    }
  }
  for (int64_t h = kh * ratio + lane; h < (kh + 1) * ratio; h += 32) {
    float dg = 0.f, dbeta = 0.f;
    for (int64_t g = 0; g < p.groups; ++g) {
      dg += s.dgp[(t * p.v_heads + h) * p.groups + g];
      dbeta += s.dbp[(t * p.v_heads + h) * p.groups + g];
    }
    const float x = p.a.row(t)[h] + p.dt_bias[h];
    p.da.row(t)[h] = dg * (-expf(p.a_log[h]) * sigmoidf(x));
    const float beta = s.beta[t * p.v_heads + h];
    p.db.row(t)[h] = dbeta * beta * (1.f - beta);
  }
}

// The register kernel's instance for `rows_per_lane` (2, 4, 8, 16 or 32), and its shared memory.
using RegKernel = void (*)(GdnBackwardParams, Scratch);
RegKernel reg_kernel(int64_t rows_per_lane) {
  switch (rows_per_lane) {
    case 2: return gdn_backward_reg_kernel<2>;
    case 4: return gdn_backward_reg_kernel<4>;
    case 8: return gdn_backward_reg_kernel<8>;
    case 16: return gdn_backward_reg_kernel<16>;
    case 32: return gdn_backward_reg_kernel<32>;
    default: return nullptr;
  }
}

size_t reg_smem_bytes(int64_t rows_per_lane) {
  switch (rows_per_lane) {
    case 2: return reg_smem_floats<2>() * sizeof(float);
    case 4: return reg_smem_floats<4>() * sizeof(float);
    case 8: return reg_smem_floats<8>() * sizeof(float);
    case 16: return reg_smem_floats<16>() * sizeof(float);
    case 32: return reg_smem_floats<32>() * sizeof(float);
    default: return 0;
  }
}

// Lets the instance take its shared memory where that passes the default 48 KB (dk above 128).
Status allow_reg_smem(int64_t rows_per_lane) {
  return allow_shared_memory(reinterpret_cast<const void*>(reg_kernel(rows_per_lane)),
                             static_cast<int64_t>(reg_smem_bytes(rows_per_lane)), "gdn_backward_reg_kernel");
}

std::string shape_of(const GdnBackwardParams& p) {
  return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " k_heads=" +
         std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) +
         " dv=" + std::to_string(p.dv) + " chunk=" + std::to_string(p.chunk) + " cols=" + std::to_string(p.cols) +
         " groups=" + std::to_string(p.groups) + " blocks=" + std::to_string(p.state_blocks) +
         " " + gdn_backward_kernel_name(p.kernel) +
         (p.kernel == GdnBackwardKernel::kRegisters ? " rows_per_lane=" + std::to_string(p.rows_per_lane) : "");
}

// The middle stage, between prep and finish: the state kernel the plan chose, or the chunked form.
Status state_stage(const GdnBackwardParams& p, const Scratch& s, cudaStream_t stream) {
  auto shape = [&] { return shape_of(p); };
  if (p.kernel == GdnBackwardKernel::kChunked) {
    GdnChunkedBackwardBuffers b;
    b.scratch = s.state;
    b.beta = s.beta;
    b.dqp = s.dqp;
    b.dkp = s.dkp;
    b.dgp = s.dgp;
    b.dbp = s.dbp;
    return gdn_chunked_backward(p, b, stream);
  }
  const RegKernel kernel = reg_kernel(p.rows_per_lane);
  if (kernel == nullptr) return invalid_argument("gdn_backward: not planned (" + shape_of(p) + ")");
  KILN_RETURN_IF_ERROR(allow_reg_smem(p.rows_per_lane));
  kernel<<<static_cast<unsigned>(p.state_blocks), kRegThreads, reg_smem_bytes(p.rows_per_lane), stream>>>(p, s);
  return launch_status("gdn_backward_reg_kernel", shape, stream);
}

}  // namespace

const char* gdn_backward_kernel_name(GdnBackwardKernel k) {
  return k == GdnBackwardKernel::kChunked ? "chunked" : "registers";
}

Status gdn_backward_plan(GdnBackwardParams& p, int sm_count, size_t smem_optin) {
  if (p.dk < 1 || p.dk > kGdnBackwardMaxDk || p.dv < 1 || p.k_heads < 1 || p.v_heads % p.k_heads != 0 ||
      p.rows < 1 || p.chunk < 1 || p.max_len < 1)
    return invalid_argument("gdn_backward_plan: unsupported sizes (" + shape_of(p) + ")");
  // The chunked form takes dk 16, 32, 64 and 128 (and rows of at most 65,535 chunks) where its
  // shared memory fits (217 KB at dk 128: sm_90's); other sizes and devices walk the tokens in
  // registers.
  if (p.kernel == GdnBackwardKernel::kChunked &&
      (!gdn_chunked_backward_takes(p.dk) || (p.max_len + 63) / 64 > 65535 || p.rows > 65535 ||
       gdn_chunked_backward_smem_bytes(p.dk) > smem_optin))
    p.kernel = GdnBackwardKernel::kRegisters;
  if (p.kernel == GdnBackwardKernel::kChunked) {
    p.cols = p.dv;
    p.groups = 1;
    p.state_blocks = 0;
    p.rows_per_lane = 0;
    return {};
  }
  // The register walk: eight lanes cover dk at the smallest power-of-two rows a lane that reaches it.
  p.rows_per_lane = 2;
  while (8 * p.rows_per_lane < p.dk) p.rows_per_lane *= 2;
  p.cols = kRegCols;
  p.groups = (p.dv + kRegCols - 1) / kRegCols;
  if (reg_smem_bytes(p.rows_per_lane) > smem_optin)
    return invalid_argument("gdn_backward_plan: " + std::to_string(reg_smem_bytes(p.rows_per_lane)) +
                            " bytes of shared memory per block exceed the device's " + std::to_string(smem_optin) +
                            " (" + shape_of(p) + ")");
  KILN_RETURN_IF_ERROR(allow_reg_smem(p.rows_per_lane));
  int per_sm = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, reg_kernel(p.rows_per_lane), kRegThreads,
                                                                    reg_smem_bytes(p.rows_per_lane));
      e != cudaSuccess || per_sm < 1)
    return internal_error("gdn_backward_reg_kernel: no block fits a multiprocessor (" + shape_of(p) + "): " +
                          cudaGetErrorString(e));
  const int64_t items = p.rows * p.v_heads * p.groups;
  p.state_blocks = std::min<int64_t>(items, static_cast<int64_t>(per_sm) * std::max(sm_count, 1));
  return {};
}

size_t gdn_backward_scratch_floats(const GdnBackwardParams& p) {
  return static_cast<size_t>(scratch_layout(p).total);
}

Status gdn_backward(const GdnBackwardParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.tokens == 0) return {};
  const bool chunked = p.kernel == GdnBackwardKernel::kChunked;
  if ((chunked ? p.groups != 1 : p.state_blocks < 1 || p.state_blocks > 0x7fffffff) || p.scratch == nullptr)
    return invalid_argument("gdn_backward: not planned (" + shape_of(p) + ")");
  const Scratch s = scratch_of(p);
  auto shape = [&] { return shape_of(p); };
  const unsigned pair_blocks = grid_blocks(p.tokens * p.k_heads, kPairWarps, 0x7fffffff);
  gdn_backward_prep_kernel<<<pair_blocks, kPairWarps * 32, 0, stream>>>(p, s);
  KILN_RETURN_IF_ERROR(launch_status("gdn_backward_prep_kernel", shape, stream));
  KILN_RETURN_IF_ERROR(state_stage(p, s, stream));
  gdn_backward_finish_kernel<<<pair_blocks, kPairWarps * 32, 0, stream>>>(p, s);
  return launch_status("gdn_backward_finish_kernel", shape, stream);
}

}  // namespace kiln::cuda
