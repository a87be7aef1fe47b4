// RMSNorm in its three forms ((1 + w), plain w, gated by silu(z)), optionally fused with the
// residual add. Sums of squares accumulate in f32, as the reference does.
#include <cmath>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

Support Norm::supports(const NormRequest& r) const {
  if (r.dtype != DType::kF32 || r.out_dtype != DType::kF32)
    return Support::declined("activations must be f32 on the cpu backend");
  if (r.kind == NormKind::kGated && r.fused_residual) return Support::declined("the gated norm has no residual form");
  return Support::native();
}

Status Norm::rms_norm(const NormArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const NormRequest r = describe(a);
  const int64_t W = r.width;
  const float* w = a.weight.data<float>();
  default_thread_pool().parallel_for(r.rows, 8, [&](int64_t r0, int64_t r1, int) {
    for (int64_t i = r0; i < r1; ++i) {
      const float* x = a.x.data<float>() + i * a.x.stride(0);
      if (r.fused_residual) {
        float* res = a.residual.data<float>() + i * a.residual.stride(0);
        for (int64_t j = 0; j < W; ++j) res[j] += x[j];
        x = res;
      }
      float ss = 0.f;
      for (int64_t j = 0; j < W; ++j) ss += x[j] * x[j];
      const float inv = 1.f / std::sqrt(ss / static_cast<float>(W) + a.eps);
      float* y = a.out.data<float>() + i * a.out.stride(0);
      switch (r.kind) {
        case NormKind::kOnePlus:
          for (int64_t j = 0; j < W; ++j) y[j] = x[j] * inv * (1.f + w[j]);
          break;
        case NormKind::kPlain:
          for (int64_t j = 0; j < W; ++j) y[j] = x[j] * inv * w[j];
          break;
        case NormKind::kGated: {
          const float* z = a.gate.data<float>() + i * a.gate.stride(0);
          for (int64_t j = 0; j < W; ++j) y[j] = w[j] * (x[j] * inv) * (z[j] / (1.f + std::exp(-z[j])));
          break;
        }
      }
    }
  });
  return {};
}

}  // namespace kiln::cpu
