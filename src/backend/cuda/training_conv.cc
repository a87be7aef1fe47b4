// The backward of the depthwise causal conv1d + silu from a zero state per row, on the device
// (kernels/conv_backward.cu). The rows come from the layout's cu_seqlens on the device; its
// host-side max_q_len sizes the grid.
#include "backend/cuda/kernels/conv_backward.h"
#include "backend/cuda/training.h"
#include "backend/cuda/views.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

Support Training::supports_conv(const TrainRequest& r) {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  if (r.rows <= 0 || r.tokens <= 0 || r.width <= 0 || r.kernel <= 0) return Support::declined("sizes must be positive");
  if (r.kernel > kConvMaxKernel) return Support::declined("kernel must be 1.." + std::to_string(kConvMaxKernel));
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  return Support::native();
}

Status Training::conv_backward(const ConvBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  ConvBackwardParams p;
  p.rows = a.layout->rows;
  p.tokens = a.x.dim(0);
  p.channels = a.x.dim(1);
  p.kernel = a.weight.dim(1);
  p.max_row_tokens = a.layout->max_q_len;
  p.x = rows_of<const float>(a.x);
  p.weight = rows_of<const float>(a.weight);
  p.dout = rows_of<const float>(a.dout);
  p.dx = rows_of<float>(a.dx);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  ProfileScope prof(ctx_->profiler.get(), [&] { return "train conv_backward tokens=" + std::to_string(p.tokens); });
  return cuda::conv_backward(p, ctx_->stream).with_context(req);
}

}  // namespace kiln::cuda
