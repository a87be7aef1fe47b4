// The backward of causal GQA attention with the fused output gate, over dense per-token K/V, each
// row of the layout from position 0. Probabilities are recomputed per query (one score vector
// at a time, never a [T, T] matrix); a task owns one (row, KV head), so the gradients of K and V,
// which the group's query heads and all later queries share, are summed without races.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_facets.h"
#include "backend/cpu/layout_view.h"
#include "backend/training_checks.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

Status Training::attention_backward(const AttentionBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  const LayoutView lv(a.layout);
  const int64_t R = a.layout->rows, Hq = a.q.dim(1), Hkv = a.k.dim(1), D = a.q.dim(2), group = Hq / Hkv;
  for (int64_t r = 0; r < R; ++r)
    if (lv.row_len(r) < 0 || lv.cu[r + 1] > a.q.dim(0))
      return invalid_argument(req + ": row " + std::to_string(r) + " of cu_seqlens is outside the tokens");
  auto at = [](const Tensor& t, int64_t tok, int64_t h) { return t.data<float>() + tok * t.stride(0) + h * t.stride(1); };
  const bool gated = a.gate.defined();

  default_thread_pool().parallel_for(R * Hkv, 1, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> p, dp, o(static_cast<size_t>(D)), dO(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / Hkv, kvh = i % Hkv, begin = lv.row_begin(row), len = lv.row_len(row);
      for (int64_t j = 0; j < len; ++j) {
        std::fill_n(at(a.dk, begin + j, kvh), D, 0.f);
        std::fill_n(at(a.dv, begin + j, kvh), D, 0.f);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        for (int64_t t = 0; t < len; ++t) {  // query at position t attends keys 0..t
          const int64_t tok = begin + t;
          const float* q = at(a.q, tok, h);
          p.resize(static_cast<size_t>(t + 1));
          dp.resize(static_cast<size_t>(t + 1));
          float mx = -INFINITY;
          for (int64_t j = 0; j <= t; ++j) {
            const float* k = at(a.k, begin + j, kvh);
            float d = 0.f;
            for (int64_t e = 0; e < D; ++e) d += q[e] * k[e];
            p[j] = d * a.scale;
            mx = std::max(mx, p[j]);
          }
          float sum = 0.f;
          for (int64_t j = 0; j <= t; ++j) sum += (p[j] = std::exp(p[j] - mx));
          const float inv = 1.f / sum;
          std::fill(o.begin(), o.end(), 0.f);
          for (int64_t j = 0; j <= t; ++j) {
            p[j] *= inv;
            const float* v = at(a.v, begin + j, kvh);
            for (int64_t e = 0; e < D; ++e) o[e] += p[j] * v[e];
          }
          // out = o * sigmoid(gate): the gradient reaching o, and the gate's own.
          const float* dy = at(a.dout, tok, h);
          if (gated) {
            const float* g = at(a.gate, tok, h);
            float* dg = at(a.dgate, tok, h);
            for (int64_t e = 0; e < D; ++e) {
              const float s = 1.f / (1.f + std::exp(-g[e]));
              dO[e] = dy[e] * s;
              dg[e] = dy[e] * o[e] * s * (1.f - s);
            }
          } else {
            std::copy_n(dy, D, dO.begin());
          }
          // dp_j = dO . v_j; ds_j = p_j (dp_j - dO . o); dq = scale sum ds_j k_j; dk_j += scale ds_j q.
          float od = 0.f;
          for (int64_t e = 0; e < D; ++e) od += dO[e] * o[e];
          float* dq = at(a.dq, tok, h);
          std::fill_n(dq, D, 0.f);
          for (int64_t j = 0; j <= t; ++j) {
            const float* v = at(a.v, begin + j, kvh);
            float d = 0.f;
            for (int64_t e = 0; e < D; ++e) d += dO[e] * v[e];
            const float ds = p[j] * (d - od) * a.scale;
            const float* k = at(a.k, begin + j, kvh);
            float* dk = at(a.dk, begin + j, kvh);
            float* dv = at(a.dv, begin + j, kvh);
            for (int64_t e = 0; e < D; ++e) {
              dq[e] += ds * k[e];
              dk[e] += ds * q[e];
              dv[e] += p[j] * dO[e];
            }
          }
        }
      }
    }
  });
  return {};
}

}  // namespace kiln::cpu
