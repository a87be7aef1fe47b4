// RMSNorm in its three forms, optionally fused with the residual add, its output f32 or a GEMM's
// 16-bit operand (kernels/rms_norm.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/rms_norm.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

Support Norm::supports(const NormRequest& r) const {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  if (r.kind == NormKind::kGated && r.fused_residual) return Support::declined("the gated norm has no residual form");
  if (r.out_dtype != DType::kF32) {
    if (r.out_dtype != DType::kBF16 && r.out_dtype != DType::kF16)
      return Support::declined("the output must be f32, bf16 or f16");
    if (!tuning().bf16_operands) return Support::declined("16-bit GEMM operands are off");
  }
  return Support::native();
}

Status Norm::rms_norm(const NormArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const NormRequest r = describe(a);
  RmsNormParams p;
  p.kind = static_cast<RmsKind>(static_cast<int>(r.kind));
  p.rows = r.rows;
  p.width = r.width;
  p.x = rows_of<const float>(a.x);
  p.weight = a.weight.data<float>();
  p.out = rows_of<void>(a.out);
  p.out_dtype = a.out.dtype();
  p.eps = a.eps;
  if (r.fused_residual) p.residual = rows_of<float>(a.residual);
  if (r.kind == NormKind::kGated) p.gate = rows_of<const float>(a.gate);
  ProfileScope prof(ctx_->profiler.get(), [&] { return "norm " + r.describe(); });
  return in_context(cuda::rms_norm(p, ctx_->stream), a);
}

}  // namespace kiln::cuda
