// The optimizer steps of docs/training.md ("Optimizers") on f32 host parameters, in place on param,
// m and v: Muon (Newton-Schulz-5 in the Gram space of the smaller side, so a LoRA factor's
// iteration is rank x rank), AdamW (bias-corrected, decoupled weight decay) and SGD, each reading
// the gradient times hyper.grad_scale; and the sum of squares behind the global gradient norm.
// Reductions (the norms, the Gram matrix, the Newton-Schulz products) accumulate in double; the
// iterates are f32.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_facets.h"
#include "backend/optimizer_checks.h"

namespace kiln::cpu {

namespace {

// Newton-Schulz-5 of x [rows, cols] (row-major), in place: x / ||x||_F, then `steps` times
// x = a x + (b g + c g^2) x with g = x x^T when rows <= cols, else x = a x + x (b g + c g^2) with
// g = x^T x; both are the same iteration (the second is the first on x^T), on an s x s Gram
// matrix, s = min(rows, cols).
void newton_schulz(float* x, int64_t rows, int64_t cols, int steps) {
  constexpr double ka = 3.4445, kb = -4.7750, kc = 2.0315;
  double norm = 0;
  for (int64_t i = 0; i < rows * cols; ++i) norm += static_cast<double>(x[i]) * x[i];
  norm = std::sqrt(norm);
  if (norm == 0) return;  // a zero update stays zero (no 0/0)
  for (int64_t i = 0; i < rows * cols; ++i) x[i] = static_cast<float>(x[i] / norm);

  // The s x n view: x itself when wide, x^T (copied) when tall, so every row is contiguous.
  const bool wide = rows <= cols;
  const int64_t s = wide ? rows : cols, n = wide ? cols : rows;
  std::vector<float> y(s * n);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) (wide ? y[i * n + j] : y[j * n + i]) = x[i * cols + j];
  std::vector<double> g(s * s), p(s * s), acc(n);
  std::vector<float> next(s * n);
  for (int it = 0; it < steps; ++it) {
    for (int64_t i = 0; i < s; ++i)
      for (int64_t j = i; j < s; ++j) {
        double d = 0;
        for (int64_t k = 0; k < n; ++k) d += static_cast<double>(y[i * n + k]) * y[j * n + k];
        g[i * s + j] = g[j * s + i] = d;
      }
    for (int64_t i = 0; i < s; ++i)  // p = b g + c g^2
      for (int64_t j = 0; j < s; ++j) {
        double d = 0;
        for (int64_t k = 0; k < s; ++k) d += g[i * s + k] * g[k * s + j];
        p[i * s + j] = kb * g[i * s + j] + kc * d;
      }
    for (int64_t i = 0; i < s; ++i) {  // next = a y + p y
      for (int64_t k = 0; k < n; ++k) acc[k] = ka * y[i * n + k];
      for (int64_t j = 0; j < s; ++j) {
        const double pij = p[i * s + j];
        const float* yj = &y[j * n];
        for (int64_t k = 0; k < n; ++k) acc[k] += pij * yj[k];
      }
      for (int64_t k = 0; k < n; ++k) next[i * n + k] = static_cast<float>(acc[k]);
    }
    y.swap(next);
  }
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) x[i * cols + j] = wide ? y[i * n + j] : y[j * n + i];
}

}  // namespace

Support Optimizer::supports(const OptimizerRequest& r) const {
  switch (r.kind) {
    case OptimizerKind::kMuon:
    case OptimizerKind::kAdamW:
    case OptimizerKind::kSgd: break;
    default: return Support::declined("unknown optimizer kind " + std::to_string(static_cast<int>(r.kind)));
  }
  if (r.rows < 1 || r.cols < 1)
    return Support::declined("an empty parameter [" + std::to_string(r.rows) + ", " + std::to_string(r.cols) + "]");
  return Support::native();
}

Status Optimizer::step(const OptimizerStepArgs& a) {
  const OptimizerRequest r = describe(a);
  const std::string req = r.describe();
  const Support s = supports(r);
  if (!s.runs_natively()) return unsupported("cpu declined " + req + ": " + s.constraint);
  KILN_RETURN_IF_ERROR(validate_optimizer_step(a, DeviceKind::kHost, req));
  const int64_t n = a.param.numel();
  float* p = a.param.data<float>();
  const OptimizerHyper& h = a.hyper;
  // The gradient as the step reads it; a scale of 1 is exact, so no copy is made then.
  std::vector<float> scaled;
  const float* g = a.grad.data<float>();
  if (h.grad_scale != 1.f) {
    scaled.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) scaled[i] = g[i] * h.grad_scale;
    g = scaled.data();
  }
  const float decay = 1.f - h.lr * h.weight_decay;  // decoupled: shrinks p, not the gradient
  switch (a.kind) {
    case OptimizerKind::kSgd:
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay - h.lr * g[i];
      return {};
    case OptimizerKind::kAdamW: {
      float* m = a.m.data<float>();
      float* v = a.v.data<float>();
      const double c1 = 1.0 - std::pow(static_cast<double>(h.beta1), static_cast<double>(a.step));
      const double c2 = 1.0 - std::pow(static_cast<double>(h.beta2), static_cast<double>(a.step));
      for (int64_t i = 0; i < n; ++i) {
        m[i] = h.beta1 * m[i] + (1.f - h.beta1) * g[i];
        v[i] = h.beta2 * v[i] + (1.f - h.beta2) * g[i] * g[i];
        const double mhat = m[i] / c1, vhat = v[i] / c2;
        p[i] = static_cast<float>(p[i] * decay - h.lr * mhat / (std::sqrt(vhat) + h.eps));
      }
      return {};
    }
    case OptimizerKind::kMuon: {
      float* m = a.m.data<float>();
      std::vector<float> b(n);
      for (int64_t i = 0; i < n; ++i) {
        m[i] = h.momentum * m[i] + g[i];
        b[i] = h.nesterov ? g[i] + h.momentum * m[i] : m[i];
      }
      float gain = 1.f;
      if (r.rows > 1 && r.cols > 1) {  // a matrix: orthogonalise; a vector takes b as it is
        newton_schulz(b.data(), r.rows, r.cols, h.ns_steps);
        gain = std::sqrt(static_cast<float>(std::max(r.rows, r.cols)));
      }
      for (int64_t i = 0; i < n; ++i) p[i] = p[i] * decay - h.lr * gain * b[i];
      return {};
    }
  }
  return internal_error(req + ": unhandled optimizer kind");
}

Result<double> Optimizer::sum_squares(std::span<const Tensor> tensors) {
  KILN_RETURN_IF_ERROR(validate_sum_squares(tensors, DeviceKind::kHost));
  double sum = 0;
  for (const Tensor& t : tensors) {
    const float* x = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i) sum += static_cast<double>(x[i]) * x[i];
  }
  return sum;
}

}  // namespace kiln::cpu
