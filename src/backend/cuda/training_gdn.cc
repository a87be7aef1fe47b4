// The gated delta rule's backward on the device (kernels/gdn_backward.h), computing what the CPU
// reference (cpu/training_gdn.cc) computes: chunk-boundary states kept, the states inside a chunk
// recomputed, dS carried backwards, then the GQA sum and the l2 norms' backward. The row bounds
// stay on the device; the layout's host-side max_q_len sizes the scratch (make_batch_layout sets
// it to the longest row).
#include <algorithm>
#include <string>

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/gdn_backward.h"
#include "backend/cuda/kernels/gdn_chunked_backward.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/training.h"
#include "backend/cuda/views.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

Support Training::supports_gdn(const TrainRequest& r) {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cuda backend");
  // TrainRequest for GDN: q_heads = k_heads, kv_heads = v_heads, head_dim = dk, inner = dv.
  if (r.rows <= 0 || r.tokens <= 0 || r.q_heads <= 0 || r.kv_heads <= 0 || r.head_dim <= 0 || r.inner <= 0)
    return Support::declined("sizes must be positive");
  if (r.kv_heads % r.q_heads != 0) return Support::declined("v_heads is not a multiple of k_heads");
  if (r.head_dim > kGdnBackwardMaxDk)
    return Support::declined("dk above " + std::to_string(kGdnBackwardMaxDk) +
                             " (a warp holds one key head's q and k at 8 elements a lane)");
  return Support::native();
}

Status Training::gdn_backward(const GdnBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  if (!a.layout->cu_seqlens.is_contiguous()) return invalid_argument(req + ": cu_seqlens must be contiguous");
  GdnBackwardParams p;
  p.rows = a.layout->rows;
  p.tokens = a.q.dim(0);
  p.k_heads = a.q.dim(1);
  p.dk = a.q.dim(2);
  p.v_heads = a.v.dim(1);
  p.dv = a.v.dim(2);
  p.max_len = a.layout->max_q_len > 0 ? std::min(a.layout->max_q_len, p.tokens) : p.tokens;
  // The chunk only trades scratch for recomputation (the values do not depend on it); no chunk
  // need be longer than the longest row.
  p.chunk = std::min<int64_t>(a.chunk, p.max_len);
  p.q = heads_of<const float>(a.q);
  p.k = heads_of<const float>(a.k);
  p.v = heads_of<const float>(a.v);
  p.a = rows_of<const float>(a.a);
  p.b = rows_of<const float>(a.b);
  p.a_log = a.a_log.data<float>();
  p.dt_bias = a.dt_bias.data<float>();
  p.dout = heads_of<const float>(a.dout);
  p.dq = heads_of<float>(a.dq);
  p.dk_out = heads_of<float>(a.dk);
  p.dv_out = heads_of<float>(a.dv);
  p.da = rows_of<float>(a.da);
  p.db = rows_of<float>(a.db);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.kernel = tuning().gdn_backward_registers ? GdnBackwardKernel::kRegisters : GdnBackwardKernel::kChunked;
  p.tf32 = a.compute != DType::kF32 && tuning().gdn_backward_tf32;  // one tf32 pass where rounding is allowed
  KILN_RETURN_IF_ERROR(
      gdn_backward_plan(p, device_target().multiprocessors, static_cast<size_t>(device_target().shared_optin)).with_context(req));
  if (a.kept.defined() && p.kernel == GdnBackwardKernel::kChunked) {  // the walk recomputes its own states
    const auto want = static_cast<int64_t>(gdn_chunked_backward_kept_floats(p));
    if (a.kept.dtype() != DType::kF32 || a.kept.numel() != want || !a.kept.is_contiguous())
      return invalid_argument(req + ": kept holds " + std::to_string(a.kept.numel()) + " " + std::string(dtype_name(a.kept.dtype())) +
                              " elements; the forward of these rows keeps " + std::to_string(want) +
                              " contiguous f32 (was it run on another layout?)");
    p.kept = a.kept.data<float>();
  }
  // Back to the pool on return: stream order makes its reuse by the next call safe.
  KILN_ASSIGN_OR_RETURN(Tensor scratch,
                        ctx_->empty({static_cast<int64_t>(gdn_backward_scratch_floats(p))}, DType::kF32));
  p.scratch = scratch.data<float>();
  ctx_->last_gdn_backward = gdn_backward_kernel_name(p.kernel);
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return std::string("train gdn_backward ") + gdn_backward_kernel_name(p.kernel) + " tokens=" +
           std::to_string(p.tokens) + " groups=" + std::to_string(p.groups);
  });
  return cuda::gdn_backward(p, ctx_->stream).with_context(req);
}

}  // namespace kiln::cuda
