// The backward of the row-local forward ops on the device (kernels/training_pointwise.cu): the
// three RMSNorm kinds, silu(a) * b and the partial rotary embedding. Rows may be strided.
#include <climits>

#include "backend/cuda/kernels/training_pointwise.h"
#include "backend/cuda/training.h"
#include "backend/cuda/views.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

Support Training::supports_pointwise(const TrainRequest& r) {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  switch (r.op) {
    case TrainOp::kNormBackward:
    case TrainOp::kSiluMulBackward:
      if (r.tokens <= 0 || r.width <= 0) return Support::declined("rows and width must be positive");
      if (r.op == TrainOp::kNormBackward && r.tokens > INT_MAX)
        return Support::declined("more than 2^31 - 1 rows (one block per row)");
      return Support::native();
    case TrainOp::kRopeBackward:
      if (r.tokens <= 0 || r.q_heads <= 0 || r.kv_heads <= 0 || r.head_dim <= 0)
        return Support::declined("sizes must be positive");
      if (r.inner <= 0 || r.inner % 2 != 0 || r.inner > r.head_dim)
        return Support::declined("rotary_dim must be even and within head_dim");
      if (r.tokens > INT_MAX) return Support::declined("more than 2^31 - 1 tokens (one block per token)");
      return Support::native();
    default: return Support::declined("not a pointwise op");
  }
}

Status Training::norm_backward(const NormBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  NormBackwardParams p;
  p.kind = static_cast<RmsKind>(static_cast<int>(a.kind));
  p.rows = a.x.dim(0);
  p.width = a.x.dim(1);
  p.x = rows_of<const float>(a.x);
  p.weight = a.weight.data<float>();
  p.dout = rows_of<const float>(a.dout);
  p.dx = rows_of<float>(a.dx);
  if (a.kind == NormKind::kGated) {
    p.gate = rows_of<const float>(a.gate);
    p.dgate = rows_of<float>(a.dgate);
  }
  p.accumulate = a.accumulate;
  p.eps = a.eps;
  ProfileScope prof(ctx_->profiler.get(), [&] { return "train norm_backward rows=" + std::to_string(p.rows); });
  return cuda::norm_backward(p, ctx_->stream).with_context(req);
}

Status Training::silu_mul_backward(const SiluMulBackwardArgs& s) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, s, "cuda", DeviceKind::kCuda));
  SiluMulBackwardParams p;
  p.rows = s.a.dim(0);
  p.width = s.a.dim(1);
  p.a = rows_of<const float>(s.a);
  p.b = rows_of<const float>(s.b);
  p.dout = rows_of<const float>(s.dout);
  p.da = rows_of<float>(s.da);
  p.db = rows_of<float>(s.db);
  ProfileScope prof(ctx_->profiler.get(), [&] { return "train silu_mul_backward rows=" + std::to_string(p.rows); });
  return cuda::silu_mul_backward(p, ctx_->stream).with_context(req);
}

Status Training::rope_backward(const RopeBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  RopeBackwardParams p;
  p.tokens = a.dq.dim(0);
  p.q_heads = a.dq.dim(1);
  p.kv_heads = a.dk.dim(1);
  p.rotary_dim = a.rotary_dim;
  p.dq = heads_of<float>(a.dq);
  p.dk = heads_of<float>(a.dk);
  p.positions = a.positions.data<int32_t>();
  p.theta = a.theta;
  ProfileScope prof(ctx_->profiler.get(), [&] { return "train rope_backward tokens=" + std::to_string(p.tokens); });
  return cuda::rope_backward(p, ctx_->stream).with_context(req);
}

}  // namespace kiln::cuda
