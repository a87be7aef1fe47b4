// The backward of the GDN mixer's two CPU ops (docs/ARCHITECTURE.md, "Training"): the depthwise
// causal conv1d + silu of cpu/conv.cc, and the gated delta rule of cpu/gdn.cc with its l2 norms
// and gates. Training rows start at position 0 from zero conv and recurrent state.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "backend/cpu/layout_view.h"
#include "backend/training_checks.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {

const DType F = DType::kF32;

float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }

// The layout's rows must tile the tokens (index values are read here, on the host; its shape was
// checked by validate_train).
Status check_row_values(const BatchLayout* l, int64_t tokens, const std::string& req) {
  const int32_t* cu = l->cu_seqlens.data<int32_t>();
  if (cu[0] != 0 || cu[l->rows] != tokens)
    return invalid_argument(req + ": cu_seqlens must run from 0 to " + std::to_string(tokens));
  for (int64_t r = 0; r < l->rows; ++r)
    if (cu[r + 1] < cu[r]) return invalid_argument(req + ": cu_seqlens decreases at row " + std::to_string(r));
  return {};
}


// ---- the gated delta rule ----

// One (row, value head): normalised q (scaled) and k, v, the gates, the gradient of the output.
struct HeadSeq {
  int64_t n = 0, dk = 0, dv = 0;
  std::vector<float> q, k, v, dout;  // [n, dk], [n, dk], [n, dv], [n, dv]
  std::vector<float> g, beta;        // [n]
};

// Scratch of one worker, reused across the (row, value head) pairs it takes.
struct HeadScratch {
  std::vector<float> bounds;  // [chunks, dk, dv]: the state entering each chunk
  std::vector<float> states;  // [C, dk, dv]: the state entering each token of the chunk in hand
  std::vector<float> u, r;    // [C, dv]: beta (v - S'^T k) and v - S'^T k per token
  std::vector<float> S;       // [dk, dv]: the running state (and where a chunk's last state goes)
  std::vector<float> dS;      // [dk, dv]: the gradient of the state after the token in hand
  std::vector<float> du, w;   // [dv]
};

// A dot product in eight partial sums, which the compiler vectorises (a single f32 accumulator
// it may not reorder).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[j + l] * b[j + l];
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; j < n; ++j) s += a[j] * b[j];
  return s;
}

// One token of the recurrence from P = S_{t-1} into `next` (which may be P):
// r = v - exp(g) P^T k, u = beta r, next = exp(g) P + k u^T.
void step_state(const float* P, float* next, const float* k, const float* v, float g, float beta, float* u, float* r,
                int64_t dk, int64_t dv) {
  const float eg = std::exp(g);
  std::fill(r, r + dv, 0.f);
  for (int64_t i = 0; i < dk; ++i) {
    const float* p = P + i * dv;
    for (int64_t j = 0; j < dv; ++j) r[j] += p[j] * k[i];
  }
  for (int64_t j = 0; j < dv; ++j) {
    r[j] = v[j] - eg * r[j];
    u[j] = beta * r[j];
  }
  for (int64_t i = 0; i < dk; ++i) {
    const float* p = P + i * dv;
    float* s = next + i * dv;
    for (int64_t j = 0; j < dv; ++j) s[j] = eg * p[j] + k[i] * u[j];
  }
}

// Gradients of one (row, value head) with respect to the normalised q and k (dqh, dkh: [n, dk],
// row stride qk_stride), v (dv_out: [n, dv], row stride dv_stride), g and beta. dS, the gradient
// of the state, is carried backwards token by token; the states it needs are recomputed a chunk
// at a time from the boundary states kept by a first forward pass, so memory is O(n / C + C)
// states, not O(n).
void delta_rule_backward(const HeadSeq& in, int64_t C, HeadScratch& s, float* dqh, float* dkh, int64_t qk_stride,
                         float* dv_out, int64_t dv_stride, float* dg, float* dbeta) {
  const int64_t n = in.n, dk = in.dk, dv = in.dv, DS = dk * dv, chunks = (n + C - 1) / C;
  s.bounds.resize(chunks * DS);
  s.states.resize(std::min(C, n) * DS);
  s.u.resize(std::min(C, n) * dv);
  s.r.resize(std::min(C, n) * dv);
  s.S.assign(DS, 0.f);
  s.dS.assign(DS, 0.f);
  s.du.resize(dv);
  s.w.resize(dv);
  for (int64_t t = 0; t < n; ++t) {
    if (t % C == 0) std::copy(s.S.begin(), s.S.end(), s.bounds.begin() + (t / C) * DS);
    if (t / C == chunks - 1) break;  // the last chunk's states are recomputed below anyway
    step_state(s.S.data(), s.S.data(), &in.k[t * dk], &in.v[t * dv], in.g[t], in.beta[t], s.u.data(), s.r.data(), dk,
               dv);
  }
  float* dS = s.dS.data();
  float* du = s.du.data();
  float* w = s.w.data();
  for (int64_t c = chunks - 1; c >= 0; --c) {
    const int64_t t0 = c * C, L = std::min(C, n - t0);
    // states[l] = the state entering token t0 + l.
    std::copy_n(&s.bounds[c * DS], DS, s.states.begin());
    for (int64_t l = 0; l < L; ++l) {
      const int64_t t = t0 + l;
      float* next = l + 1 < L ? &s.states[(l + 1) * DS] : s.S.data();  // the chunk's last state is not needed
      step_state(&s.states[l * DS], next, &in.k[t * dk], &in.v[t * dv], in.g[t], in.beta[t], &s.u[l * dv],
                 &s.r[l * dv], dk, dv);
    }
    for (int64_t l = L - 1; l >= 0; --l) {
      const int64_t t = t0 + l;
      const float* P = &s.states[l * DS];  // S_{t-1}
      const float *q = &in.q[t * dk], *k = &in.k[t * dk], *o = &in.dout[t * dv];
      const float *u = &s.u[l * dv], *r = &s.r[l * dv];
      const float eg = std::exp(in.g[t]), beta = in.beta[t];
      float* dq = dqh + t * qk_stride;
      float* dk_t = dkh + t * qk_stride;
      // o = S_t^T q with S_t = S' + k u^T, S' = eg P:  dS += q do^T;  dq = eg P do + k (u . do);
      // du = dS^T k;  dk = dS u.
      float u_do = 0.f;
      for (int64_t j = 0; j < dv; ++j) u_do += u[j] * o[j];
      std::fill(du, du + dv, 0.f);
      for (int64_t i = 0; i < dk; ++i) {
        float* ds = dS + i * dv;
        const float* p = P + i * dv;
        const float qi = q[i], ki = k[i];
        for (int64_t j = 0; j < dv; ++j) {
          ds[j] += qi * o[j];
          du[j] += ds[j] * ki;
        }
        dk_t[i] = dot(ds, u, dv);
        dq[i] = eg * dot(p, o, dv) + ki * u_do;
      }
      // u = beta (v - S'^T k):  dv = beta du = w;  dbeta = du . r;  dS' = dS - k w^T;  dk -= S' w.
      float db = 0.f;
      float* dvt = dv_out + t * dv_stride;
      for (int64_t j = 0; j < dv; ++j) {
        db += du[j] * r[j];
        w[j] = beta * du[j];
        dvt[j] = w[j];
      }
      dbeta[t] = db;
      // S' = eg S_{t-1}:  dg = sum(dS' * S');  dS_{t-1} = eg dS'.
      float g_acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        float* ds = dS + i * dv;
        const float* p = P + i * dv;
        const float ki = k[i];
        // dS' and S' of this row are formed in place: ds = dS', then ds *= eg after the sums.
        for (int64_t j = 0; j < dv; ++j) ds[j] -= ki * w[j];
        dk_t[i] -= eg * dot(p, w, dv);
        g_acc += eg * dot(ds, p, dv);
        for (int64_t j = 0; j < dv; ++j) ds[j] *= eg;
      }
      dg[t] = g_acc;
    }
  }
}

// y = x * scale / sqrt(|x|^2 + eps), as cpu/gdn.cc normalises q and k.
void l2_normalise(const float* x, float* y, int64_t d, float scale) {
  float ss = 0.f;
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float norm = std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) y[i] = x[i] * (scale / norm);
}

// The gradient through y = scale * x / N, N = sqrt(|x|^2 + eps):
// dx = (scale / N) (dy - x (x . dy) / N^2).
void l2_normalise_backward(const float* x, const float* dy, float* dx, int64_t d, float scale) {
  float ss = 0.f, xdy = 0.f;
  for (int64_t i = 0; i < d; ++i) {
    ss += x[i] * x[i];
    xdy += x[i] * dy[i];
  }
  const float n2 = ss + 1e-6f, norm = std::sqrt(n2);
  const float c = xdy / n2;
  for (int64_t i = 0; i < d; ++i) dx[i] = (scale / norm) * (dy[i] - x[i] * c);
}

}  // namespace

// Per (row, channel block): y = the conv, dy = dout * silu'(y), then dx_j = sum_k w[k] dy_{j+K-1-k}
// (the transpose of the causal taps, cut at the row's end). Channel blocks keep the inner loops
// over contiguous channels.
Status Training::conv_backward(const ConvBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string text, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  KILN_RETURN_IF_ERROR(check_row_values(a.layout, a.x.dim(0), text));
  const LayoutView lv(a.layout);
  const int64_t C = a.x.dim(1), K = a.weight.dim(1);
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (C + kBlock - 1) / kBlock;
  const float* x = a.x.data<float>();
  const float* dout = a.dout.data<float>();
  float* dx = a.dx.data<float>();
  const int64_t xs = a.x.stride(0), ds = a.dout.stride(0), dxs = a.dx.stride(0), ws = a.weight.stride(0);
  default_thread_pool().parallel_for(a.layout->rows * blocks, 1, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> dy, wt;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / blocks, c0 = (i % blocks) * kBlock, cb = std::min(kBlock, C - c0);
      const int64_t n = lv.row_len(row), t0 = lv.row_begin(row);
      // wt[k * cb + c]: the taps of the block, tap-major so the channel loop is contiguous.
      wt.resize(static_cast<size_t>(K * cb));
      for (int64_t c = 0; c < cb; ++c)
        for (int64_t k = 0; k < K; ++k) wt[k * cb + c] = a.weight.data<float>()[(c0 + c) * ws + k];
      dy.assign(static_cast<size_t>(n * cb), 0.f);
      for (int64_t t = 0; t < n; ++t) {
        float* y = &dy[t * cb];
        // Tap k reads input t + k - (K - 1): zero state before the row's first token.
        for (int64_t k = std::max<int64_t>(0, K - 1 - t); k < K; ++k) {
          const float* xr = x + (t0 + t + k - (K - 1)) * xs + c0;
          const float* wk = &wt[k * cb];
          for (int64_t c = 0; c < cb; ++c) y[c] += wk[c] * xr[c];
        }
        const float* dor = dout + (t0 + t) * ds + c0;
        for (int64_t c = 0; c < cb; ++c) {
          const float sg = sigmoid(y[c]);
          y[c] = dor[c] * sg * (1.f + y[c] * (1.f - sg));
        }
      }
      for (int64_t j = 0; j < n; ++j) {
        float* dxr = dx + (t0 + j) * dxs + c0;
        std::fill(dxr, dxr + cb, 0.f);
        // Input j feeds outputs t = j + K - 1 - k for the taps k with t inside the row.
        for (int64_t k = std::max<int64_t>(0, j + K - n); k < K; ++k) {
          const float* dyr = &dy[(j + K - 1 - k) * cb];
          const float* wk = &wt[k * cb];
          for (int64_t c = 0; c < cb; ++c) dxr[c] += wk[c] * dyr[c];
        }
      }
    }
  });
  return {};
}

// Two passes. (1) Per (row, value head), in parallel: the recurrence's backward gives dv, da, db
// directly and the gradients of the normalised q and k into per-value-head buffers. (2) Per
// (token, key head): the value heads sharing the key head are summed (GQA) and taken through the
// l2 norms (and q's 1/sqrt(dk)) to the raw q and k. No two tasks write the same element.
Status Training::gdn_backward(const GdnBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string text, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  KILN_RETURN_IF_ERROR(check_row_values(a.layout, a.q.dim(0), text));
  const LayoutView lv(a.layout);
  const int64_t T = a.q.dim(0), Hk = a.q.dim(1), dk = a.q.dim(2), Hv = a.v.dim(1), dv = a.v.dim(2);
  const int64_t ratio = Hv / Hk, rows = a.layout->rows;
  const float q_scale = 1.f / std::sqrt(static_cast<float>(dk));
  std::vector<float> dqh(static_cast<size_t>(T * Hv * dk)), dkh(static_cast<size_t>(T * Hv * dk));

  default_thread_pool().parallel_for(rows * Hv, 1, [&](int64_t i0, int64_t i1, int) {
    HeadSeq in;
    HeadScratch scratch;
    std::vector<float> dg, dbeta, gate;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / Hv, h = i % Hv, kh = h / ratio;
      const int64_t n = lv.row_len(row), t0 = lv.row_begin(row);
      if (n == 0) continue;
      in.n = n;
      in.dk = dk;
      in.dv = dv;
      in.q.resize(n * dk);
      in.k.resize(n * dk);
      in.v.resize(n * dv);
      in.dout.resize(n * dv);
      in.g.resize(n);
      in.beta.resize(n);
      gate.resize(n);
      const float A = std::exp(a.a_log.data<float>()[h]);
      const float dt_bias = a.dt_bias.data<float>()[h];
      for (int64_t t = 0; t < n; ++t) {
        const int64_t tok = t0 + t;
        l2_normalise(a.q.data<float>() + tok * a.q.stride(0) + kh * a.q.stride(1), &in.q[t * dk], dk, q_scale);
        l2_normalise(a.k.data<float>() + tok * a.k.stride(0) + kh * a.k.stride(1), &in.k[t * dk], dk, 1.f);
        const float* vs = a.v.data<float>() + tok * a.v.stride(0) + h * a.v.stride(1);
        const float* os = a.dout.data<float>() + tok * a.dout.stride(0) + h * a.dout.stride(1);
        std::copy(vs, vs + dv, &in.v[t * dv]);
        std::copy(os, os + dv, &in.dout[t * dv]);
        const float x = a.a.data<float>()[tok * a.a.stride(0) + h] + dt_bias;
        in.g[t] = -A * (x > 20.f ? x : std::log1p(std::exp(x)));  // as cpu/gdn.cc's softplus
        gate[t] = -A * sigmoid(x);                                // dg/da
        in.beta[t] = sigmoid(a.b.data<float>()[tok * a.b.stride(0) + h]);
      }
      dg.resize(n);
      dbeta.resize(n);
      // dqh, dkh: [T, Hv, dk].
      const int64_t at = (t0 * Hv + h) * dk;
      float* dvp = a.dv.data<float>() + t0 * a.dv.stride(0) + h * a.dv.stride(1);
      delta_rule_backward(in, a.chunk, scratch, &dqh[at], &dkh[at], Hv * dk, dvp, a.dv.stride(0), dg.data(),
                          dbeta.data());
      for (int64_t t = 0; t < n; ++t) {
        const int64_t tok = t0 + t;
        a.da.data<float>()[tok * a.da.stride(0) + h] = dg[t] * gate[t];
        a.db.data<float>()[tok * a.db.stride(0) + h] = dbeta[t] * in.beta[t] * (1.f - in.beta[t]);
      }
    }
  });

  default_thread_pool().parallel_for(T * Hk, 16, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> sq(dk), sk(dk);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t tok = i / Hk, kh = i % Hk;
      std::fill(sq.begin(), sq.end(), 0.f);
      std::fill(sk.begin(), sk.end(), 0.f);
      for (int64_t h = kh * ratio; h < (kh + 1) * ratio; ++h) {
        const float* pq = &dqh[(tok * Hv + h) * dk];
        const float* pk = &dkh[(tok * Hv + h) * dk];
        for (int64_t e = 0; e < dk; ++e) {
          sq[e] += pq[e];
          sk[e] += pk[e];
        }
      }
      const int64_t qo = tok * a.q.stride(0) + kh * a.q.stride(1), ko = tok * a.k.stride(0) + kh * a.k.stride(1);
      l2_normalise_backward(a.q.data<float>() + qo, sq.data(),
                            a.dq.data<float>() + tok * a.dq.stride(0) + kh * a.dq.stride(1), dk, q_scale);
      l2_normalise_backward(a.k.data<float>() + ko, sk.data(),
                            a.dk.data<float>() + tok * a.dk.stride(0) + kh * a.dk.stride(1), dk, 1.f);
    }
  });
  return {};
}

}  // namespace kiln::cpu
