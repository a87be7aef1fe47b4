// Partial rotary embedding, paged K/V writes and causal GQA attention with the fused output gate.
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "backend/cpu/layout_view.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

Support Attention::supports(const RopeRequest& r) const {
  if (r.rotary_dim <= 0 || r.rotary_dim % 2 != 0 || r.rotary_dim > r.head_dim)
    return Support::declined("rotary_dim must be even and within head_dim");
  return Support::native();
}

Support Attention::supports(const KvWriteRequest& r) const {
  if (r.kv_dtype != DType::kF32) return Support::declined("the cpu K/V cache is f32");
  return Support::native();
}

Support Attention::supports(const AttentionRequest& r) const {
  if (r.dtype != DType::kF32 || r.kv_dtype != DType::kF32) return Support::declined("the cpu backend attends in f32");
  if (r.kv_heads <= 0 || r.q_heads % r.kv_heads != 0) return Support::declined("q_heads must be a multiple of kv_heads");
  return Support::native();
}

Status Attention::rope(const RopeArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const RopeRequest r = describe(a);
  const int64_t half = a.rotary_dim / 2;
  // inv_freq_i = theta^(-2i / rotary_dim), rounded to f32 as the reference does; angles in f32.
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(a.theta), (2.0 * i) / a.rotary_dim));
  const int32_t* pos = a.positions.data<int32_t>();
  default_thread_pool().parallel_for(r.tokens, 4, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> c(half), sn(half);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        float angle = static_cast<float>(pos[t]) * inv_freq[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (const Tensor* x : {&a.q, &a.k}) {
        for (int64_t h = 0; h < x->dim(1); ++h) {
          float* v = x->data<float>() + t * x->stride(0) + h * x->stride(1);
          for (int64_t i = 0; i < half; ++i) {
            float x1 = v[i], x2 = v[i + half];
            v[i] = x1 * c[i] - x2 * sn[i];
            v[i + half] = x2 * c[i] + x1 * sn[i];
          }
        }
      }
    }
  });
  return {};
}

Status Attention::write_kv(const KvWriteArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const KvWriteRequest r = describe(a);
  const int64_t row = r.kv_heads * r.head_dim, slots = a.k_cache.dim(0) * a.k_cache.dim(1);
  const int32_t* map = a.slot_mapping.data<int32_t>();
  for (int64_t t = 0; t < r.tokens; ++t) {
    if (map[t] < 0 || map[t] >= slots)
      return invalid_argument(req + ": slot " + std::to_string(map[t]) + " of token " + std::to_string(t) +
                              " is outside the cache (" + std::to_string(slots) + " slots)");
    for (auto [src, dst] : {std::pair{&a.k, &a.k_cache}, std::pair{&a.v, &a.v_cache}})
      for (int64_t h = 0; h < r.kv_heads; ++h)
        std::memcpy(dst->data<float>() + map[t] * row + h * r.head_dim,
                    src->data<float>() + t * src->stride(0) + h * src->stride(1), r.head_dim * sizeof(float));
  }
  return {};
}

Status Attention::attend(const AttentionArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const AttentionRequest r = describe(a);
  const LayoutView lv(a.layout);
  const int64_t Hq = r.q_heads, D = r.head_dim, group = r.q_heads / r.kv_heads;
  const int64_t kv_row = r.kv_heads * D;
  if (a.kept != nullptr) *a.kept = Tensor();  // the CPU backward recomputes the softmax
  for (int64_t row = 0; row < r.rows; ++row)
    if (lv.kv_lens[row] < lv.row_len(row))
      return invalid_argument(req + ": row " + std::to_string(row) + " has fewer K/V entries than query tokens");

  default_thread_pool().parallel_for(r.tokens * Hq, 2, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> scores;
    std::vector<float> acc(static_cast<size_t>(D));
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / Hq, h = i % Hq, kvh = h / group;
      const int64_t row = lv.row_of_token(t);
      const int64_t kv_len = lv.kv_lens[row];
      const int64_t pos = kv_len - lv.row_len(row) + (t - lv.row_begin(row));  // causal: keys 0..pos
      const float* q = a.q.data<float>() + t * a.q.stride(0) + h * a.q.stride(1);
      scores.resize(static_cast<size_t>(pos + 1));
      float mx = -INFINITY;
      for (int64_t j = 0; j <= pos; ++j) {
        const float* k = a.k_cache.data<float>() + lv.kv_slot(row, j) * kv_row + kvh * D;
        float d = 0.f;
        for (int64_t e = 0; e < D; ++e) d += q[e] * k[e];
        scores[j] = d * a.scale;
        mx = std::max(mx, scores[j]);
      }
      float sum = 0.f;
      for (int64_t j = 0; j <= pos; ++j) sum += (scores[j] = std::exp(scores[j] - mx));
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int64_t j = 0; j <= pos; ++j) {
        const float* v = a.v_cache.data<float>() + lv.kv_slot(row, j) * kv_row + kvh * D;
        const float p = scores[j];
        for (int64_t e = 0; e < D; ++e) acc[e] += p * v[e];
      }
      float* o = a.out.data<float>() + t * a.out.stride(0) + h * a.out.stride(1);
      const float inv = 1.f / sum;
      if (r.output_gate) {
        const float* g = a.gate.data<float>() + t * a.gate.stride(0) + h * a.gate.stride(1);
        for (int64_t e = 0; e < D; ++e) o[e] = acc[e] * inv / (1.f + std::exp(-g[e]));
      } else {
        for (int64_t e = 0; e < D; ++e) o[e] = acc[e] * inv;
      }
    }
  });
  return {};
}

}  // namespace kiln::cpu
