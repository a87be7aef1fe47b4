// Device memory (from the context's caching pool) and host transfers, ordered on the stream.
#include <algorithm>
#include <cstring>

#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"

namespace kiln::cuda {

namespace {

constexpr size_t kStagedBytes = size_t{64} << 10;

}  // namespace

Result<Tensor> Storage::allocate(Shape shape, DType dtype) {
  ProfileScope prof(ctx_->profiler.get(), [] { return std::string("storage allocate (zeroed)"); });
  KILN_ASSIGN_OR_RETURN(Tensor t, ctx_->empty(shape, dtype));
  KILN_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(t.raw(), 0, t.nbytes(), ctx_->stream),
                                   "allocate: cudaMemsetAsync " + t.describe()));
  return t;
}

Result<Tensor> Storage::upload(const Tensor& host) {
  if (!host.defined() || host.device().kind != DeviceKind::kHost)
    return invalid_argument("upload: source is not a host tensor");
  if (!host.is_contiguous()) return invalid_argument("upload: " + host.describe() + " is not contiguous");
  ProfileScope prof(ctx_->profiler.get(), [] { return std::string("storage upload"); });
  KILN_ASSIGN_OR_RETURN(Tensor t, ctx_->empty(host.shape(), host.dtype()));
  // From pageable memory the call returns once the source has been staged: `host` may go at once.
  KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(t.raw(), host.raw(), host.nbytes(), cudaMemcpyHostToDevice,
                                                   ctx_->stream),
                                   "upload " + host.describe()));
  return t;
}

// One pool block (a cudaMalloc of its own at this size), freed back to the pool when the model's
// last weight view goes.
Result<std::shared_ptr<kiln::Storage>> Storage::weight_arena(size_t bytes) {
  KILN_ASSIGN_OR_RETURN(Tensor block, ctx_->empty({static_cast<int64_t>(std::max<size_t>(bytes, 1))}, DType::kU8));
  return block.storage();
}

Status Storage::copy_from_host(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_transfer(s, d, DeviceKind::kCuda, "copy_from_host"));
  KILN_RETURN_IF_ERROR(ctx_->check_owner("copy_from_host"));
  return cuda_status(cudaMemcpyAsync(d.raw(), s.raw(), s.nbytes(), cudaMemcpyHostToDevice, ctx_->stream),
                     "copy_from_host " + s.describe());
}

Status Storage::copy_to_host(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_transfer(d, s, DeviceKind::kCuda, "copy_to_host"));
  KILN_RETURN_IF_ERROR(ctx_->check_owner("copy_to_host"));
  ProfileScope prof(ctx_->profiler.get(), [] { return std::string("storage copy_to_host (synchronises)"); });
  ctx_->bytes_to_host.fetch_add(s.nbytes(), std::memory_order_relaxed);
  if (s.nbytes() >= kStagedBytes) {  // through page-locked memory: the logits of every step
    std::lock_guard<std::mutex> lock(ctx_->staging_mu);
    KILN_ASSIGN_OR_RETURN(void* buf, ctx_->staging(s.nbytes()));
    KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(buf, s.raw(), s.nbytes(), cudaMemcpyDeviceToHost, ctx_->stream),
                                     "copy_to_host " + s.describe()));
    KILN_RETURN_IF_ERROR(ctx_->synchronize("copy_to_host: synchronize"));
    std::memcpy(d.raw(), buf, s.nbytes());
    return {};
  }
  KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(d.raw(), s.raw(), s.nbytes(), cudaMemcpyDeviceToHost, ctx_->stream),
                                   "copy_to_host " + s.describe()));
  return ctx_->synchronize("copy_to_host: synchronize");
}

Status Storage::copy(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_device_copy(s, d, DeviceKind::kCuda));
  KILN_RETURN_IF_ERROR(ctx_->check_owner("copy"));
  return cuda_status(cudaMemcpyAsync(d.raw(), s.raw(), s.nbytes(), cudaMemcpyDeviceToDevice, ctx_->stream),
                     "copy " + s.describe());
}

Status Storage::zero(const Tensor& d) {
  if (!d.defined() || d.device().kind != DeviceKind::kCuda) return invalid_argument("zero: not a cuda tensor");
  if (!d.is_contiguous()) return invalid_argument("zero: " + d.describe() + " is not contiguous");
  KILN_RETURN_IF_ERROR(ctx_->check_owner("zero"));
  return cuda_status(cudaMemsetAsync(d.raw(), 0, d.nbytes(), ctx_->stream), "zero " + d.describe());
}

Status Storage::synchronize() { return ctx_->synchronize("synchronize"); }

}  // namespace kiln::cuda
