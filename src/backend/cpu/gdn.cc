// The gated delta rule on the CPU, in its recurrent form (token by token) and its chunked form
// (WY/UT: a chunk's updates solved at once by forward substitution). Both continue from and update
// each sequence's f32 state S[v_head] in R^{dk x dv}. See docs/model.md, "The gated delta rule" and
// "The chunked form".
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "backend/cpu/layout_view.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {

// Per-token inputs of one (row, value head), already normalised and gated.
struct HeadInputs {
  int64_t n = 0, dk = 0, dv = 0;
  std::vector<float> q, k, v;  // [n, dk], [n, dk], [n, dv]
  std::vector<float> g, beta;  // [n]
};

void l2_normalise(float* x, int64_t d, float scale) {
  float ss = 0.f;
  for (int64_t i = 0; i < d; ++i) ss += x[i] * x[i];
  const float inv = scale / std::sqrt(ss + 1e-6f);
  for (int64_t i = 0; i < d; ++i) x[i] *= inv;
}

float softplus(float x) { return x > 20.f ? x : std::log1p(std::exp(x)); }

void recurrent(HeadInputs& in, float* S, float* out, int64_t out_stride) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<float> u(static_cast<size_t>(dv));
  for (int64_t t = 0; t < in.n; ++t) {
    const float* k = &in.k[t * dk];
    const float* q = &in.q[t * dk];
    const float* v = &in.v[t * dv];
    const float decay = std::exp(in.g[t]);
    // Pass 1: S' = decay * S and u = S'^T k, row by row of S.
    std::fill(u.begin(), u.end(), 0.f);
    for (int64_t i = 0; i < dk; ++i) {
      float* s = S + i * dv;
      const float ki = k[i];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] *= decay;
        u[j] += s[j] * ki;
      }
    }
    // u = beta * (v - S'^T k)
    for (int64_t j = 0; j < dv; ++j) u[j] = in.beta[t] * (v[j] - u[j]);
    // Pass 2: S = S' + k u^T and o = S^T q.
    float* o = out + t * out_stride;
    std::fill(o, o + dv, 0.f);
    for (int64_t i = 0; i < dk; ++i) {
      float* s = S + i * dv;
      const float ki = k[i], qi = q[i];
      for (int64_t j = 0; j < dv; ++j) {
        s[j] += ki * u[j];
        o[j] += s[j] * qi;
      }
    }
  }
}

void chunked(HeadInputs& in, int64_t C, float* S, float* out, int64_t out_stride) {
  const int64_t dk = in.dk, dv = in.dv;
  std::vector<float> G(C), W(C * dv), QS(C * dv), KK(C * C), QK(C * C), S_new(dk * dv);
  for (int64_t c0 = 0; c0 < in.n; c0 += C) {
    const int64_t L = std::min(C, in.n - c0);
    const float* q = &in.q[c0 * dk];
    const float* k = &in.k[c0 * dk];
    const float* v = &in.v[c0 * dv];
    const float* beta = &in.beta[c0];
    float acc = 0.f;
    for (int64_t t = 0; t < L; ++t) G[t] = (acc += in.g[c0 + t]);
    // Dot products within the chunk (lower triangle, diagonal included for q.k).
    for (int64_t t = 0; t < L; ++t)
      for (int64_t i = 0; i <= t; ++i) {
        float kk = 0.f, qk = 0.f;
        for (int64_t e = 0; e < dk; ++e) {
          kk += k[t * dk + e] * k[i * dk + e];
          qk += q[t * dk + e] * k[i * dk + e];
        }
        KK[t * C + i] = kk;
        QK[t * C + i] = qk;
      }
    // W = (I + A)^{-1} beta (v - exp(G) k S0) by forward substitution, with
    // A[t, i] = beta_t exp(G_t - G_i) (k_t . k_i) for i < t. Gaps G_t - G_i <= 0 only.
    for (int64_t t = 0; t < L; ++t) {
      float* w = &W[t * dv];
      float* qs = &QS[t * dv];
      for (int64_t j = 0; j < dv; ++j) w[j] = qs[j] = 0.f;
      for (int64_t e = 0; e < dk; ++e) {
        const float ke = k[t * dk + e], qe = q[t * dk + e];
        const float* s = S + e * dv;
        for (int64_t j = 0; j < dv; ++j) {
          w[j] += ke * s[j];
          qs[j] += qe * s[j];
        }
      }
      const float eg = std::exp(G[t]);
      for (int64_t j = 0; j < dv; ++j) w[j] = beta[t] * (v[t * dv + j] - eg * w[j]);
      for (int64_t i = 0; i < t; ++i) {
        const float a = beta[t] * std::exp(G[t] - G[i]) * KK[t * C + i];
        const float* wi = &W[i * dv];
        for (int64_t j = 0; j < dv; ++j) w[j] -= a * wi[j];
      }
    }
    // out_t = exp(G_t) q_t S0 + sum_{i <= t} exp(G_t - G_i) (q_t . k_i) W_i
    for (int64_t t = 0; t < L; ++t) {
      float* o = out + (c0 + t) * out_stride;
      const float eg = std::exp(G[t]);
      for (int64_t j = 0; j < dv; ++j) o[j] = eg * QS[t * dv + j];
      for (int64_t i = 0; i <= t; ++i) {
        const float a = std::exp(G[t] - G[i]) * QK[t * C + i];
        const float* wi = &W[i * dv];
        for (int64_t j = 0; j < dv; ++j) o[j] += a * wi[j];
      }
    }
    // S_end = exp(G_last) S0 + sum_i exp(G_last - G_i) k_i W_i^T
    const float glast = G[L - 1];
    const float el = std::exp(glast);
    for (int64_t e = 0; e < dk * dv; ++e) S_new[e] = el * S[e];
    for (int64_t i = 0; i < L; ++i) {
      const float d = std::exp(glast - G[i]);
      for (int64_t e = 0; e < dk; ++e) {
        const float ke = d * k[i * dk + e];
        float* s = &S_new[e * dv];
        const float* wi = &W[i * dv];
        for (int64_t j = 0; j < dv; ++j) s[j] += ke * wi[j];
      }
    }
    std::copy(S_new.begin(), S_new.end(), S);
  }
}

}  // namespace

Support Gdn::supports(const GdnRequest& r) const {
  if (r.state_dtype != DType::kF32) return Support::declined("the cpu GDN state is f32");
  if (r.k_heads <= 0 || r.v_heads % r.k_heads != 0) return Support::declined("v_heads must be a multiple of k_heads");
  if (r.form == GdnForm::kChunked && r.chunk < 1) return Support::declined("chunk must be positive");
  return Support::native();
}

Status Gdn::delta_rule(const GdnArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const GdnRequest r = describe(a);
  const LayoutView lv(a.layout);
  KILN_RETURN_IF_ERROR(lv.check_state_slots(a.state.dim(0), req));

  const int64_t Hv = r.v_heads, dk = r.dk, dv = r.dv, ratio = r.v_heads / r.k_heads;
  const float q_scale = 1.f / std::sqrt(static_cast<float>(dk));
  default_thread_pool().parallel_for(r.rows * Hv, 1, [&](int64_t i0, int64_t i1, int) {
    HeadInputs in;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / Hv, h = i % Hv, kh = h / ratio;
      const int64_t n = lv.row_len(row), t0 = lv.row_begin(row);
      in.n = n;
      in.dk = dk;
      in.dv = dv;
      in.q.resize(n * dk);
      in.k.resize(n * dk);
      in.v.resize(n * dv);
      in.g.resize(n);
      in.beta.resize(n);
      const float A = std::exp(a.a_log.data<float>()[h]);
      const float dt_bias = a.dt_bias.data<float>()[h];
      for (int64_t t = 0; t < n; ++t) {
        const int64_t tok = t0 + t;
        const float* qs = a.q.data<float>() + tok * a.q.stride(0) + kh * a.q.stride(1);
        const float* ks = a.k.data<float>() + tok * a.k.stride(0) + kh * a.k.stride(1);
        const float* vs = a.v.data<float>() + tok * a.v.stride(0) + h * a.v.stride(1);
        std::copy(qs, qs + dk, &in.q[t * dk]);
        std::copy(ks, ks + dk, &in.k[t * dk]);
        std::copy(vs, vs + dv, &in.v[t * dv]);
        l2_normalise(&in.q[t * dk], dk, q_scale);
        l2_normalise(&in.k[t * dk], dk, 1.f);
        const float av = a.a.data<float>()[tok * a.a.stride(0) + h];
        const float bv = a.b.data<float>()[tok * a.b.stride(0) + h];
        in.g[t] = -A * softplus(av + dt_bias);
        in.beta[t] = 1.f / (1.f + std::exp(-bv));
      }
      float* S = a.state.data<float>() + (lv.slots[row] * Hv + h) * dk * dv;
      float* out = a.out.data<float>() + t0 * a.out.stride(0) + h * a.out.stride(1);
      if (r.form == GdnForm::kRecurrent) recurrent(in, S, out, a.out.stride(0));
      else chunked(in, a.chunk, S, out, a.out.stride(0));
    }
  });
  return {};
}

}  // namespace kiln::cpu
