// Greedy selection on the device (kernels/argmax.cu); host logits are staged through the device.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/argmax.h"

namespace kiln::cuda {

Support Sampling::supports(const SampleRequest& r) const {
  if (!r.greedy) return Support::declined("only greedy selection is implemented on the cuda backend so far");
  return Support::native();
}

Status Sampling::argmax(const ArgmaxArgs& a) {
  SampleRequest r = describe(a);
  std::string req = r.describe();
  Support s = supports(r);
  if (!s.runs_natively()) return declined("cuda", req, s.constraint);
  if (!a.logits.defined() || !a.ids.defined()) return invalid_argument(req + ": logits or ids missing");
  if (a.logits.device().kind != a.ids.device().kind)
    return invalid_argument(req + ": logits and ids must be on the same device");
  const bool host = a.logits.device().kind == DeviceKind::kHost;
  ProfileScope prof(ctx_->profiler.get(), [&] { return std::string(host ? "argmax (host logits staged)" : "argmax"); });
  Tensor logits = a.logits, ids = a.ids;
  std::unique_lock<std::mutex> staging_lock;
  if (host) {
    if (!a.logits.is_contiguous() || !a.ids.is_contiguous())
      return invalid_argument(req + ": host logits and ids must be contiguous");
    if (a.logits.dtype() != DType::kF32 || a.ids.dtype() != DType::kI32)
      return invalid_argument(req + ": logits must be f32 and ids i32");
    KILN_ASSIGN_OR_RETURN(logits, ctx_->empty(a.logits.shape(), DType::kF32));
    KILN_ASSIGN_OR_RETURN(ids, ctx_->empty(a.ids.shape(), DType::kI32));
    // Through page-locked memory, held until the ids are back (the copy below synchronises).
    staging_lock = std::unique_lock<std::mutex>(ctx_->staging_mu);
    KILN_ASSIGN_OR_RETURN(void* buf, ctx_->staging(a.logits.nbytes()));
    std::memcpy(buf, a.logits.raw(), a.logits.nbytes());
    KILN_RETURN_IF_ERROR(cuda_status(
        cudaMemcpyAsync(logits.raw(), buf, a.logits.nbytes(), cudaMemcpyHostToDevice, ctx_->stream),
        req + ": staging host logits"));
  }
  KILN_RETURN_IF_ERROR(validate(ArgmaxArgs{logits, ids}, DeviceKind::kCuda, req));
  ArgmaxParams p;
  p.rows = r.rows;
  p.vocab = r.vocab;
  p.logits = logits.data<float>();
  p.logits_stride = logits.stride(0);
  p.ids = ids.data<int32_t>();
  Tensor part_values, part_indices;  // back to the pool on return: stream order makes the reuse safe
  if (const int64_t chunks = argmax_chunks(r.vocab); chunks > 1) {
    KILN_ASSIGN_OR_RETURN(part_values, ctx_->empty({r.rows * chunks}, DType::kF32));
    KILN_ASSIGN_OR_RETURN(part_indices, ctx_->empty({r.rows * chunks}, DType::kI32));
    if (!counters_.defined() || counters_.numel() < r.rows) {
      KILN_ASSIGN_OR_RETURN(counters_, ctx_->empty({std::max<int64_t>(r.rows, 64)}, DType::kI32));
      KILN_RETURN_IF_ERROR(
          cuda_status(cudaMemsetAsync(counters_.raw(), 0, counters_.nbytes(), ctx_->stream), req + ": zero counters"));
    }
    p.part_values = part_values.data<float>();
    p.part_indices = part_indices.data<int32_t>();
    p.counters = static_cast<unsigned*>(counters_.raw());
  }
  KILN_RETURN_IF_ERROR(cuda::argmax(p, ctx_->stream).with_context(req));
  if (!host) return {};
  KILN_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(a.ids.raw(), ids.raw(), a.ids.nbytes(), cudaMemcpyDeviceToHost, ctx_->stream), req + ": ids back"));
  return cuda_status(cudaStreamSynchronize(ctx_->stream), req + ": synchronize");
}

}  // namespace kiln::cuda
