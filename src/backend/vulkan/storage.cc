// Device memory (from the context's pool) and host transfers through its staging ring, ordered
// on the queue.
#include "backend/arg_checks.h"
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Result<Tensor> Storage::empty(Shape shape, DType dtype) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<kiln::Storage> s, ctx_->memory().allocate(bytes, ctx_));
  return Tensor(std::move(s), dtype, shape);
}

Result<Tensor> Storage::allocate(Shape shape, DType dtype) {
  KILN_ASSIGN_OR_RETURN(Tensor t, empty(shape, dtype));
  KILN_RETURN_IF_ERROR(ctx_->fill_zero(locate(t), t.nbytes()));
  return t;
}

Result<Tensor> Storage::upload(const Tensor& host) {
  if (!host.defined() || host.device().kind != DeviceKind::kHost)
    return invalid_argument("upload: source is not a host tensor");
  if (!host.is_contiguous()) return invalid_argument("upload: " + host.describe() + " is not contiguous");
  KILN_ASSIGN_OR_RETURN(Tensor t, empty(host.shape(), host.dtype()));
  KILN_RETURN_IF_ERROR(ctx_->upload(host.raw(), locate(t), host.nbytes()));
  return t;
}

// One allocation of its own, returned to the driver when the model's last weight view goes.
Result<std::shared_ptr<kiln::Storage>> Storage::weight_arena(size_t bytes) {
  // Past what one allocation may hold, each weight is its own upload instead.
  if (ctx_->info().max_allocation_bytes && bytes > ctx_->info().max_allocation_bytes)
    return std::shared_ptr<kiln::Storage>();
  return ctx_->memory().dedicated(bytes, ctx_);
}

Status Storage::copy_from_host(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_transfer(s, d, DeviceKind::kVulkan, "copy_from_host"));
  return ctx_->upload(s.raw(), locate(d), s.nbytes());
}

Status Storage::copy_to_host(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_transfer(d, s, DeviceKind::kVulkan, "copy_to_host"));
  return ctx_->download(locate(s), d.raw(), s.nbytes());
}

// Aligned copies run as a shader (copy.comp), the rest as a transfer command.
Status Storage::copy(const Tensor& s, const Tensor& d) {
  KILN_RETURN_IF_ERROR(check_device_copy(s, d, DeviceKind::kVulkan));
  const uint64_t src = address(s), dst = address(d);
  const size_t bytes = s.nbytes();
  if ((src | dst | bytes) % 16 != 0 || bytes / 16 > UINT32_MAX) return ctx_->copy(locate(s), locate(d), bytes);
  struct {
    uint64_t src, dst;
    uint32_t words;
  } push{src, dst, static_cast<uint32_t>(bytes / 16)};
  return ctx_->dispatch("copy", push, ctx_->grid((bytes / 16 + 255) / 256));
}

Status Storage::zero(const Tensor& d) {
  if (!d.defined() || d.device().kind != DeviceKind::kVulkan) return invalid_argument("zero: not a vulkan tensor");
  if (!d.is_contiguous()) return invalid_argument("zero: " + d.describe() + " is not contiguous");
  return ctx_->fill_zero(locate(d), d.nbytes());
}

Status Storage::synchronize() { return ctx_->synchronize(); }

}  // namespace kiln::vulkan
