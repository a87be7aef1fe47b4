// Per-token log-probabilities of the targets under the LM head, and their gradient with respect
// to the hidden states (fused linear cross-entropy): the vocabulary is walked in chunks, each
// chunk's logits computed for a block of tokens, folded into an online max / sum of exponentials
// and dropped, so [tokens, vocab] logits never exist; the backward recomputes them the same way.
// Tasks own vocabulary chunks; per-worker partial sums are merged at the end.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_facets.h"
#include "backend/training_checks.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {

constexpr int64_t kVocabChunk = 1024;
constexpr int64_t kTokenBlock = 256;

// The f32 rows [v0, v0 + n) of the LM head.
const float* head_rows(const Tensor& w, int64_t v0, int64_t n, std::vector<float>& buf) {
  const int64_t W = w.dim(1);
  if (w.dtype() == DType::kF32) return w.data<float>() + v0 * W;
  buf.resize(static_cast<size_t>(n * W));
  to_f32(w.dtype(), w.data<uint16_t>() + v0 * W, buf.data(), static_cast<size_t>(n * W));
  return buf.data();
}

// logits[tb, n] = hidden[t0 : t0 + tb] rows(v0 : v0 + n)^T.
void chunk_logits(const Tensor& hidden, int64_t t0, int64_t tb, const float* rows, int64_t n, float* logits) {
  const int64_t W = hidden.dim(1);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tb), static_cast<int>(n), static_cast<int>(W),
              1.f, hidden.data<float>() + t0 * hidden.stride(0), static_cast<int>(hidden.stride(0)), rows,
              static_cast<int>(W), 0.f, logits, static_cast<int>(n));
}

Status check_targets(const Tensor& targets, int64_t vocab, const std::string& req) {
  const int32_t* tg = targets.data<int32_t>();
  for (int64_t t = 0; t < targets.dim(0); ++t)
    if (tg[t] >= vocab)
      return invalid_argument(req + ": target " + std::to_string(tg[t]) + " at token " + std::to_string(t) +
                              " is outside the vocabulary of " + std::to_string(vocab));
  return {};
}

}  // namespace

Status Training::token_logprobs(const TokenLogprobArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  const int64_t T = a.hidden.dim(0), V = a.lm_head.dim(0);
  KILN_RETURN_IF_ERROR(check_targets(a.targets, V, req));
  const int32_t* tg = a.targets.data<int32_t>();
  ThreadPool& pool = default_thread_pool();
  const int P = pool.size();
  // Per worker: running max and sum of exp(logit - max) per token.
  std::vector<float> mx(static_cast<size_t>(P * T), -INFINITY), sm(static_cast<size_t>(P * T), 0.f);
  std::vector<float> target_logit(static_cast<size_t>(T), 0.f);
  pool.parallel_for((V + kVocabChunk - 1) / kVocabChunk, 1, [&](int64_t c0, int64_t c1, int worker) {
    std::vector<float> wbuf, logits(static_cast<size_t>(std::min(kTokenBlock, T) * kVocabChunk));
    float* m = mx.data() + worker * T;
    float* s = sm.data() + worker * T;
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t v0 = c * kVocabChunk, n = std::min(kVocabChunk, V - v0);
      const float* rows = head_rows(a.lm_head, v0, n, wbuf);
      for (int64_t t0 = 0; t0 < T; t0 += kTokenBlock) {
        const int64_t tb = std::min(kTokenBlock, T - t0);
        chunk_logits(a.hidden, t0, tb, rows, n, logits.data());
        for (int64_t i = 0; i < tb; ++i) {
          const float* l = logits.data() + i * n;
          const int64_t t = t0 + i;
          float cm = m[t];
          for (int64_t j = 0; j < n; ++j) cm = std::max(cm, l[j]);
          float acc = s[t] * std::exp(m[t] - cm);  // exp(-inf) = 0 for the first chunk
          for (int64_t j = 0; j < n; ++j) acc += std::exp(l[j] - cm);
          m[t] = cm;
          s[t] = acc;
          if (tg[t] >= v0 && tg[t] < v0 + n) target_logit[t] = l[tg[t] - v0];
        }
      }
    }
  });
  float* logp = a.logp.data<float>();
  float* lse = a.lse.data<float>();
  for (int64_t t = 0; t < T; ++t) {
    float M = -INFINITY;
    for (int w = 0; w < P; ++w) M = std::max(M, mx[w * T + t]);
    double sum = 0;
    for (int w = 0; w < P; ++w)
      if (sm[w * T + t] > 0.f) sum += static_cast<double>(sm[w * T + t]) * std::exp(static_cast<double>(mx[w * T + t] - M));
    lse[t] = M + static_cast<float>(std::log(sum));
    logp[t] = tg[t] >= 0 ? target_logit[t] - lse[t] : 0.f;
  }
  return {};
}

// d(sum_t c_t logp_t)/dh_t = c_t (W[target_t] - sum_v p_tv W_v): per chunk, G = c (onehot - p),
// then dh += G W_chunk.
Status Training::token_logprobs_backward(const TokenLogprobBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  const int64_t T = a.hidden.dim(0), W = a.hidden.dim(1), V = a.lm_head.dim(0);
  KILN_RETURN_IF_ERROR(check_targets(a.targets, V, req));
  const int32_t* tg = a.targets.data<int32_t>();
  const float* lse = a.lse.data<float>();
  const float* coef = a.coef.data<float>();
  ThreadPool& pool = default_thread_pool();
  const int64_t chunks = (V + kVocabChunk - 1) / kVocabChunk;
  std::vector<std::vector<float>> dh(static_cast<size_t>(pool.size()));  // per worker that ran, [T, W]
  pool.parallel_for(chunks, 1, [&](int64_t c0, int64_t c1, int worker) {
    std::vector<float> wbuf, logits(static_cast<size_t>(std::min(kTokenBlock, T) * kVocabChunk));
    if (dh[worker].empty()) dh[worker].assign(static_cast<size_t>(T * W), 0.f);
    float* acc = dh[worker].data();
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t v0 = c * kVocabChunk, n = std::min(kVocabChunk, V - v0);
      const float* rows = head_rows(a.lm_head, v0, n, wbuf);
      for (int64_t t0 = 0; t0 < T; t0 += kTokenBlock) {
        const int64_t tb = std::min(kTokenBlock, T - t0);
        chunk_logits(a.hidden, t0, tb, rows, n, logits.data());
        for (int64_t i = 0; i < tb; ++i) {
          float* l = logits.data() + i * n;
          const int64_t t = t0 + i;
          const float c_t = tg[t] >= 0 ? coef[t] : 0.f;
          for (int64_t j = 0; j < n; ++j) l[j] = -c_t * std::exp(l[j] - lse[t]);
          if (tg[t] >= v0 && tg[t] < v0 + n) l[tg[t] - v0] += c_t;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(tb), static_cast<int>(W),
                    static_cast<int>(n), 1.f, logits.data(), static_cast<int>(n), rows, static_cast<int>(W), 1.f,
                    acc + t0 * W, static_cast<int>(W));
      }
    }
  });
  pool.parallel_for(T, 8, [&](int64_t t0, int64_t t1, int) {
    for (int64_t t = t0; t < t1; ++t) {
      float* out = a.dhidden.data<float>() + t * a.dhidden.stride(0);
      for (int64_t j = 0; j < W; ++j) {
        float v = 0.f;
        for (const auto& part : dh)
          if (!part.empty()) v += part[t * W + j];
        out[j] = a.accumulate ? out[j] + v : v;
      }
    }
  });
  return {};
}

}  // namespace kiln::cpu
