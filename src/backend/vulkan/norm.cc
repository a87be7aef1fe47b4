// RMSNorm in its three forms, optionally fused with the residual add: shaders/rms_norm.comp.
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Norm::supports(const NormRequest& r) const {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32");
  if (r.out_dtype != DType::kF32 && r.out_dtype != DType::kBF16) return Support::declined("output must be f32 or bf16");
  if (r.kind == NormKind::kGated && r.fused_residual) return Support::declined("the gated norm has no residual form");
  if (r.rows * r.width >= (int64_t{1} << 32)) return Support::declined("more than 2^32 elements");
  return Support::native();
}

Status Norm::rms_norm(const NormArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  auto stride = [](const Tensor& t) { return t.defined() ? static_cast<uint32_t>(t.stride(0)) : 0u; };
  struct {
    uint64_t x, residual, weight, gate, out;
    uint32_t width, x_stride, residual_stride, gate_stride, out_stride, kind, out_dtype;
    float eps;
  } p{address(a.x), address(a.residual), address(a.weight), address(a.gate), address(a.out),
      static_cast<uint32_t>(a.x.dim(1)), stride(a.x), stride(a.residual), stride(a.gate), stride(a.out),
      static_cast<uint32_t>(a.kind), static_cast<uint32_t>(a.out.dtype()), a.eps};
  return ctx_->dispatch("rms_norm", p, ctx_->grid(static_cast<uint64_t>(a.x.dim(0))));
}

}  // namespace kiln::vulkan
