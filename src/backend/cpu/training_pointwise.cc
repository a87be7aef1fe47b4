// The backward of the row-local forward ops: RMSNorm (three kinds), silu(a) * b, and the partial
// rotary embedding (the inverse rotation). Sums accumulate in double: they are short and the
// gradients feed a test against finite differences.
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_facets.h"
#include "backend/training_checks.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {
inline float sigmoid(float x) { return 1.f / (1.f + std::exp(-x)); }
}  // namespace

// y = n * w' with n = x * inv, inv = rsqrt(mean(x^2) + eps), w' = 1 + w, w, or w * silu(z):
// dx = inv * (g - n * mean(g * n)) with g = dy * w'; dz = dy * w * n * silu'(z).
Status Training::norm_backward(const NormBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  const int64_t R = a.x.dim(0), W = a.x.dim(1);
  const float* w = a.weight.data<float>();
  default_thread_pool().parallel_for(R, 8, [&](int64_t r0, int64_t r1, int) {
    std::vector<float> g(static_cast<size_t>(W));
    for (int64_t i = r0; i < r1; ++i) {
      const float* x = a.x.data<float>() + i * a.x.stride(0);
      const float* dy = a.dout.data<float>() + i * a.dout.stride(0);
      const float* z = a.kind == NormKind::kGated ? a.gate.data<float>() + i * a.gate.stride(0) : nullptr;
      float ss = 0.f;  // as the forward sums it
      for (int64_t j = 0; j < W; ++j) ss += x[j] * x[j];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(W) + a.eps);
      double dot = 0;
      for (int64_t j = 0; j < W; ++j) {
        float wj = a.kind == NormKind::kOnePlus ? 1.f + w[j] : w[j];
        if (z) wj *= z[j] * sigmoid(z[j]);
        g[j] = dy[j] * wj;
        dot += static_cast<double>(g[j]) * x[j] * inv;
      }
      const float mean = static_cast<float>(dot / static_cast<double>(W));
      if (z) {
        float* dz = a.dgate.data<float>() + i * a.dgate.stride(0);
        for (int64_t j = 0; j < W; ++j) {
          const float s = sigmoid(z[j]);
          dz[j] = dy[j] * w[j] * x[j] * inv * s * (1.f + z[j] * (1.f - s));
        }
      }
      float* dx = a.dx.data<float>() + i * a.dx.stride(0);
      for (int64_t j = 0; j < W; ++j) {
        const float v = inv * (g[j] - x[j] * inv * mean);
        dx[j] = a.accumulate ? dx[j] + v : v;
      }
    }
  });
  return {};
}

Status Training::silu_mul_backward(const SiluMulBackwardArgs& s) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, s, "cpu", DeviceKind::kHost));
  const int64_t R = s.a.dim(0), W = s.a.dim(1);
  default_thread_pool().parallel_for(R, 4, [&](int64_t r0, int64_t r1, int) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* a = s.a.data<float>() + i * s.a.stride(0);
      const float* b = s.b.data<float>() + i * s.b.stride(0);
      const float* dy = s.dout.data<float>() + i * s.dout.stride(0);
      float* da = s.da.data<float>() + i * s.da.stride(0);
      float* db = s.db.data<float>() + i * s.db.stride(0);
      for (int64_t j = 0; j < W; ++j) {
        const float sg = sigmoid(a[j]), d = dy[j], bj = b[j], aj = a[j];
        db[j] = d * aj * sg;
        da[j] = d * bj * sg * (1.f + aj * (1.f - sg));
      }
    }
  });
  return {};
}

// The forward rotates (x1, x2) by +angle; its transpose rotates the gradient by -angle. Angles are
// computed exactly as cpu/attention.cc computes them, so the pair is an exact inverse.
Status Training::rope_backward(const RopeBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cpu", DeviceKind::kHost));
  const int64_t T = a.dq.dim(0), half = a.rotary_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[i] = static_cast<float>(1.0 / std::pow(static_cast<double>(a.theta), (2.0 * i) / a.rotary_dim));
  const int32_t* pos = a.positions.data<int32_t>();
  default_thread_pool().parallel_for(T, 4, [&](int64_t t0, int64_t t1, int) {
    std::vector<float> c(half), sn(half);
    for (int64_t t = t0; t < t1; ++t) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos[t]) * inv_freq[i];
        c[i] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sn[i] = static_cast<float>(std::sin(static_cast<double>(angle)));
      }
      for (const Tensor* x : {&a.dq, &a.dk}) {
        for (int64_t h = 0; h < x->dim(1); ++h) {
          float* v = x->data<float>() + t * x->stride(0) + h * x->stride(1);
          for (int64_t i = 0; i < half; ++i) {
            const float g1 = v[i], g2 = v[i + half];
            v[i] = g1 * c[i] + g2 * sn[i];
            v[i + half] = g2 * c[i] - g1 * sn[i];
          }
        }
      }
    }
  });
  return {};
}

}  // namespace kiln::cpu
