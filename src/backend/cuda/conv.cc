// Depthwise causal conv1d + silu with per-sequence state (kernels/causal_conv1d.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/causal_conv1d.h"

namespace kiln::cuda {

Support Conv::supports(const ConvRequest& r) const {
  if (r.kernel < 2 || r.kernel > kConvMaxKernel)
    return Support::declined("kernel must be 2.." + std::to_string(kConvMaxKernel));
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  return Support::native();
}

Status Conv::causal_conv1d(const ConvArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cuda", DeviceKind::kCuda));
  const ConvRequest r = describe(a);
  if (!a.state.is_contiguous()) return invalid_argument(req + ": state must be contiguous");
  CausalConv1dParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.channels = r.channels;
  p.kernel = r.kernel;
  p.slots = a.state.dim(0);
  p.x = a.x.data<float>();
  p.x_stride = a.x.stride(0);
  p.weight = a.weight.data<float>();
  p.weight_stride = a.weight.stride(0);
  p.state = a.state.data<float>();
  p.out = a.out.data<float>();
  p.out_stride = a.out.stride(0);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.state_slots = a.layout->state_slots.data<int32_t>();
  return cuda::causal_conv1d(p, ctx_->stream).with_context(req);
}

}  // namespace kiln::cuda
