// Depthwise causal conv1d + silu with per-sequence state (kernels/causal_conv1d.cu).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/causal_conv1d.h"
#include "backend/cuda/views.h"

namespace kiln::cuda {

Support Conv::supports(const ConvRequest& r) const {
  if (r.kernel < 2 || r.kernel > kConvMaxKernel)
    return Support::declined("kernel must be 2.." + std::to_string(kConvMaxKernel));
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  return Support::native();
}

Status Conv::causal_conv1d(const ConvArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a));
  const ConvRequest r = describe(a);
  if (!a.state.is_contiguous()) return invalid_argument(r.describe() + ": state must be contiguous");
  CausalConv1dParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.channels = r.channels;
  p.kernel = r.kernel;
  p.slots = a.state.dim(0);
  p.x = rows_of<const float>(a.x);
  p.weight = rows_of<const float>(a.weight);
  p.state = a.state.data<float>();
  p.out = rows_of<float>(a.out);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.state_slots = a.layout->state_slots.data<int32_t>();
  // The longest row bounds the token tiles; a row of one token (decode) needs one tile.
  p.max_row_tokens = a.layout->max_q_len > 0 ? a.layout->max_q_len : r.tokens;
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return std::string("conv ") + std::string(phase_name(r.phase)) + " tokens=" + std::to_string(r.tokens);
  });
  return in_context(cuda::causal_conv1d(p, ctx_->stream), a);
}

}  // namespace kiln::cuda
