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
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kStateThreads = 128;
constexpr int kStateWarps = kStateThreads / 32;
constexpr int kPairWarps = 4;  // (token, key head) pairs per block of the prep and finish kernels
constexpr int kPerLane = kGdnBackwardMaxDk / 32;

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
  s.state = s.dbp + parts;
  s.max_chunks = (p.max_len + p.chunk - 1) / p.chunk;
  s.per_block = (s.max_chunks + p.chunk) * p.dk * p.cols;
  s.total = s.state + p.state_blocks * s.per_block;
  return s;
}

// The scratch's parts as pointers, for the kernels.
struct Scratch {
  float *qn, *kn;      // [tokens, k_heads, dk]: normalised q (scaled) and k
  float *decay, *beta; // [tokens, v_heads]: exp(g), sigmoid(b)
  float *dqp, *dkp;    // [tokens, v_heads, groups, dk]: partial gradients of the normalised q, k
  float *dgp, *dbp;    // [tokens, v_heads, groups]: partial dg, dbeta
  float* state;        // [state_blocks, per_block]: [max_chunks, dk, cols] boundaries, [chunk, dk, cols] states
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
  const float* q = p.q + t * p.q_token_stride + kh * p.q_head_stride;
  const float* k = p.k + t * p.k_token_stride + kh * p.k_head_stride;
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
    const float x = p.a[t * p.a_stride + h] + p.dt_bias[h];
    const float g = -expf(p.a_log[h]) * (x > 20.f ? x : log1pf(expf(x)));  // as the forward's softplus
    s.decay[t * p.v_heads + h] = expf(g);
    s.beta[t * p.v_heads + h] = sigmoidf(p.b[t * p.b_stride + h]);
  }
}

// One token of the recurrence on column jj of S (row stride ld): r = v - e^g S^T k, u = beta r,
// S = e^g S + k u. Only the calling thread touches the column.
__device__ __forceinline__ void step_column(float* S, int ld, int jj, const float* k, int dk, float eg, float beta,
                                            float vj) {
  float acc = 0.f;
  for (int i = 0; i < dk; ++i) acc += S[i * ld + jj] * k[i];
  const float u = beta * (vj - eg * acc);
  for (int i = 0; i < dk; ++i) S[i * ld + jj] = eg * S[i * ld + jj] + k[i] * u;
}

// Blocks loop over the (row, value head, column group) items; the scratch is the block's own.
// A thread owns the columns jj = tid, tid + kStateThreads, ... of the group (their state, dS and
// all per-column work), so the column phases need no barrier; the row phase (sums over the
// columns, thread per state row i) sits between barriers. Shared memory: P, dS [dk][ld] with an
// odd ld so that both a column (consecutive jj) and a row (consecutive i) walk distinct banks.
__global__ void __launch_bounds__(kStateThreads) gdn_backward_state_kernel(GdnBackwardParams p, Scratch s) {
  extern __shared__ float smem[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int dk = static_cast<int>(p.dk), cols = static_cast<int>(p.cols), ld = cols | 1;
  const int64_t C = p.chunk, Hk = p.k_heads, Hv = p.v_heads, G = p.groups;
  float* P = smem;              // [dk][ld]: the state entering the token (the running state going forward)
  float* dS = P + dk * ld;      // [dk][ld]: the gradient of the state after the token
  float* o_s = dS + dk * ld;    // [cols]: dout
  float* u_s = o_s + cols;      // [cols]: u
  float* w_s = u_s + cols;      // [cols]: w
  float* red = w_s + cols;      // [3][kStateWarps]: per-warp dbeta, u . do, dg
  const int64_t max_chunks = (p.max_len + C - 1) / C;
  float* bounds = s.state + static_cast<int64_t>(blockIdx.x) * s.per_block;  // [max_chunks][dk][cols]
  float* states = bounds + max_chunks * dk * cols;                           // [C][dk][cols]
  const int64_t ratio = Hv / Hk, items = p.rows * Hv * G;

  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    const int64_t grp = item % G, h = (item / G) % Hv, row = item / (G * Hv);
    const int64_t t0 = p.cu_seqlens[row], n = p.cu_seqlens[row + 1] - t0;
    const int j0 = static_cast<int>(grp * cols), nc = min(cols, static_cast<int>(p.dv) - j0);
    if (n <= 0) continue;  // block-uniform, as is every branch on the item
    if (n > p.max_len) {
      // The layout's max_q_len understates this row: its states would overrun the scratch, so its
      // gradients are NaN (loud downstream) rather than computed.
      for (int64_t tok = t0; tok < t0 + n && tok < p.tokens; ++tok) {
        const int64_t part = (tok * Hv + h) * G + grp;
        for (int jj = tid; jj < nc; jj += kStateThreads)
          p.dv_out[tok * p.dv_token_stride + h * p.dv_head_stride + j0 + jj] = NAN;
        for (int i = tid; i < dk; i += kStateThreads) s.dqp[part * dk + i] = s.dkp[part * dk + i] = NAN;
        if (tid == 0) s.dgp[part] = s.dbp[part] = NAN;
      }
      continue;
    }
    const int64_t kh = h / ratio, chunks = (n + C - 1) / C;
    __syncthreads();  // the previous item's row phase no longer reads P, dS

    // Forward from the zero state, keeping the state entering each chunk (the last chunk's
    // states are recomputed below anyway).
    for (int jj = tid; jj < nc; jj += kStateThreads)
      for (int i = 0; i < dk; ++i) P[i * ld + jj] = 0.f;
    for (int64_t t = 0; t < n; ++t) {
      if (t % C == 0) {
        float* bnd = bounds + (t / C) * dk * cols;
        for (int jj = tid; jj < nc; jj += kStateThreads)
          for (int i = 0; i < dk; ++i) bnd[i * cols + jj] = P[i * ld + jj];
      }
      if (t / C == chunks - 1) break;
      const int64_t tok = t0 + t;
      const float* kt = s.kn + (tok * Hk + kh) * dk;
      const float eg = s.decay[tok * Hv + h], beta = s.beta[tok * Hv + h];
      const float* vt = p.v + tok * p.v_token_stride + h * p.v_head_stride + j0;
      for (int jj = tid; jj < nc; jj += kStateThreads) step_column(P, ld, jj, kt, dk, eg, beta, vt[jj]);
    }

    for (int jj = tid; jj < nc; jj += kStateThreads)
      for (int i = 0; i < dk; ++i) dS[i * ld + jj] = 0.f;
    for (int64_t c = chunks - 1; c >= 0; --c) {
      const int64_t tc = c * C, L = n - tc < C ? n - tc : C;
      // states[l] = the state entering token tc + l, from the boundary.
      const float* bnd = bounds + c * dk * cols;
      for (int jj = tid; jj < nc; jj += kStateThreads) {
        for (int i = 0; i < dk; ++i) P[i * ld + jj] = bnd[i * cols + jj];
        for (int64_t l = 0; l < L; ++l) {
          float* st = states + l * dk * cols;
          for (int i = 0; i < dk; ++i) st[i * cols + jj] = P[i * ld + jj];
          if (l + 1 == L) break;
          const int64_t tok = t0 + tc + l;
          const float* vt = p.v + tok * p.v_token_stride + h * p.v_head_stride + j0;
          step_column(P, ld, jj, s.kn + (tok * Hk + kh) * dk, dk, s.decay[tok * Hv + h], s.beta[tok * Hv + h], vt[jj]);
        }
      }
      for (int64_t l = L - 1; l >= 0; --l) {
        const int64_t tok = t0 + tc + l, part = (tok * Hv + h) * G + grp;
        const float* st = states + l * dk * cols;
        const float* qt = s.qn + (tok * Hk + kh) * dk;
        const float* kt = s.kn + (tok * Hk + kh) * dk;
        const float eg = s.decay[tok * Hv + h], beta = s.beta[tok * Hv + h];
        const float* vt = p.v + tok * p.v_token_stride + h * p.v_head_stride + j0;
        const float* ot = p.dout + tok * p.dout_token_stride + h * p.dout_head_stride + j0;
        float* dvt = p.dv_out + tok * p.dv_token_stride + h * p.dv_head_stride + j0;

        // Column phase 1: P from the recomputed states; r, u; dS += q do^T; du, w (= dv).
        float db_part = 0.f, udo_part = 0.f;
        for (int jj = tid; jj < nc; jj += kStateThreads) {
          float acc = 0.f;
          for (int i = 0; i < dk; ++i) {
            const float pv = st[i * cols + jj];
            P[i * ld + jj] = pv;
            acc += pv * kt[i];
          }
          const float r = vt[jj] - eg * acc, u = beta * r, oj = ot[jj];
          float du = 0.f;
          for (int i = 0; i < dk; ++i) {
            const float d = dS[i * ld + jj] + qt[i] * oj;
            dS[i * ld + jj] = d;
            du += d * kt[i];
          }
          const float wj = beta * du;
          o_s[jj] = oj;
          u_s[jj] = u;
          w_s[jj] = wj;
          dvt[jj] = wj;
          db_part += du * r;
          udo_part += u * oj;
        }
        db_part = warp_sum(db_part);
        udo_part = warp_sum(udo_part);
        if (lane == 0) {
          red[warp] = db_part;
          red[kStateWarps + warp] = udo_part;
        }
        __syncthreads();

        // Row phase: dk = dS u - e^g P w, dq = e^g P do + k (u . do), over this group's columns.
        float udo = 0.f;
        for (int w = 0; w < kStateWarps; ++w) udo += red[kStateWarps + w];
        for (int i = tid; i < dk; i += kStateThreads) {
          float su = 0.f, po = 0.f, pw = 0.f;
          for (int jj = 0; jj < nc; ++jj) {
            const float d = dS[i * ld + jj], pv = P[i * ld + jj];
            su += d * u_s[jj];
            po += pv * o_s[jj];
            pw += pv * w_s[jj];
          }
          s.dkp[part * dk + i] = su - eg * pw;
          s.dqp[part * dk + i] = eg * po + kt[i] * udo;
        }
        if (tid == 0) {
          float db = 0.f;
          for (int w = 0; w < kStateWarps; ++w) db += red[w];
          s.dbp[part] = db;
        }
        __syncthreads();

        // Column phase 2: dS' = dS - k w^T, dg = e^g sum(dS' * P), dS = e^g dS'.
        float g_part = 0.f;
        for (int jj = tid; jj < nc; jj += kStateThreads) {
          const float wj = w_s[jj];
          for (int i = 0; i < dk; ++i) {
            const float d = dS[i * ld + jj] - kt[i] * wj;
            g_part += d * P[i * ld + jj];
            dS[i * ld + jj] = eg * d;
          }
        }
        g_part = warp_sum(g_part);
        if (lane == 0) red[2 * kStateWarps + warp] = g_part;
        __syncthreads();
        if (tid == 0) {
          float g = 0.f;
          for (int w = 0; w < kStateWarps; ++w) g += red[2 * kStateWarps + w];
          s.dgp[part] = eg * g;
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
  const float* q = p.q + t * p.q_token_stride + kh * p.q_head_stride;
  const float* k = p.k + t * p.k_token_stride + kh * p.k_head_stride;
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
  float* dq = p.dq + t * p.dq_token_stride + kh * p.dq_head_stride;
  float* dkr = p.dk_out + t * p.dk_token_stride + kh * p.dk_head_stride;
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
    const float x = p.a[t * p.a_stride + h] + p.dt_bias[h];
    p.da[t * p.da_stride + h] = dg * (-expf(p.a_log[h]) * sigmoidf(x));
    const float beta = s.beta[t * p.v_heads + h];
    p.db[t * p.db_stride + h] = dbeta * beta * (1.f - beta);
  }
}

// Raises the state kernel's dynamic shared-memory limit to what the device allows, once.
cudaError_t raise_smem_limit() {
  static std::once_flag once;
  static cudaError_t err = cudaSuccess;
  std::call_once(once, [] {
    int dev = 0, optin = 0;
    err = cudaGetDevice(&dev);
    if (err == cudaSuccess) err = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (err == cudaSuccess)
      err = cudaFuncSetAttribute(gdn_backward_state_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
  });
  return err;
}

std::string shape_of(const GdnBackwardParams& p) {
  return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " k_heads=" +
         std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) +
         " dv=" + std::to_string(p.dv) + " chunk=" + std::to_string(p.chunk) + " cols=" + std::to_string(p.cols) +
         " groups=" + std::to_string(p.groups) + " blocks=" + std::to_string(p.state_blocks);
}

}  // namespace

size_t gdn_backward_smem_bytes(int64_t dk, int64_t cols) {
  return static_cast<size_t>(2 * dk * (cols | 1) + 3 * cols + 3 * kStateWarps) * sizeof(float);
}

Status gdn_backward_plan(GdnBackwardParams& p, int sm_count, size_t smem_optin) {
  if (p.dk < 1 || p.dk > kGdnBackwardMaxDk || p.dv < 1 || p.k_heads < 1 || p.v_heads % p.k_heads != 0 ||
      p.rows < 1 || p.chunk < 1 || p.max_len < 1)
    return invalid_argument("gdn_backward_plan: unsupported sizes (" + shape_of(p) + ")");
  // Column groups multiply the blocks when rows x heads alone would leave multiprocessors idle;
  // a group keeps at least 32 columns (a warp's worth for the column phases).
  const int64_t heads = p.rows * p.v_heads, target = 2 * static_cast<int64_t>(std::max(sm_count, 1));
  const int64_t groups = std::clamp<int64_t>((target + heads - 1) / heads, 1, std::max<int64_t>(1, p.dv / 32));
  int64_t cols = std::min(p.dv, ((p.dv + groups - 1) / groups + 31) / 32 * 32);
  while (gdn_backward_smem_bytes(p.dk, cols) > smem_optin && cols > 32) cols = std::max<int64_t>(32, cols / 2);
  if (gdn_backward_smem_bytes(p.dk, cols) > smem_optin)
    return invalid_argument("gdn_backward_plan: " + std::to_string(gdn_backward_smem_bytes(p.dk, cols)) +
                            " bytes of shared memory per block exceed the device's " + std::to_string(smem_optin) +
                            " (" + shape_of(p) + ")");
  p.cols = cols;
  p.groups = (p.dv + cols - 1) / cols;
  if (cudaError_t e = raise_smem_limit(); e != cudaSuccess)
    return internal_error(std::string("gdn_backward_state_kernel: raising the shared-memory limit: ") +
                          cudaGetErrorString(e));
  int per_sm = 0;
  if (cudaError_t e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(
          &per_sm, gdn_backward_state_kernel, kStateThreads, gdn_backward_smem_bytes(p.dk, cols));
      e != cudaSuccess || per_sm < 1)
    return internal_error("gdn_backward_state_kernel: no block fits a multiprocessor (" + shape_of(p) + "): " +
                          cudaGetErrorString(e));
  // Blocks past what the device holds at once would only add scratch: the resident ones loop.
  const int64_t items = p.rows * p.v_heads * p.groups;
  p.state_blocks = std::min<int64_t>(items, static_cast<int64_t>(per_sm) * std::max(sm_count, 1));
  return {};
}

size_t gdn_backward_scratch_floats(const GdnBackwardParams& p) {
  return static_cast<size_t>(scratch_layout(p).total);
}

Status gdn_backward(const GdnBackwardParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.tokens == 0) return {};
  if (p.state_blocks < 1 || p.state_blocks > 0x7fffffff || p.scratch == nullptr)
    return invalid_argument("gdn_backward: not planned (" + shape_of(p) + ")");
  const Scratch s = scratch_of(p);
  auto shape = [&] { return shape_of(p); };
  const unsigned pair_blocks = grid_blocks(p.tokens * p.k_heads, kPairWarps, 0x7fffffff);
  gdn_backward_prep_kernel<<<pair_blocks, kPairWarps * 32, 0, stream>>>(p, s);
  KILN_RETURN_IF_ERROR(launch_status("gdn_backward_prep_kernel", shape, stream));
  if (cudaError_t e = raise_smem_limit(); e != cudaSuccess)
    return internal_error(std::string("gdn_backward_state_kernel: raising the shared-memory limit: ") +
                          cudaGetErrorString(e));
  gdn_backward_state_kernel<<<static_cast<unsigned>(p.state_blocks), kStateThreads,
                              gdn_backward_smem_bytes(p.dk, p.cols), stream>>>(p, s);
  KILN_RETURN_IF_ERROR(launch_status("gdn_backward_state_kernel", shape, stream));
  gdn_backward_finish_kernel<<<pair_blocks, kPairWarps * 32, 0, stream>>>(p, s);
  return launch_status("gdn_backward_finish_kernel", shape, stream);
}

}  // namespace kiln::cuda
