// Greedy selection on the device (shaders/argmax.comp): only the ids come back to the host. Host
// logits (a forward that returned them there) are staged through the device, as CUDA's are.
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Sampling::supports(const SampleRequest& r) const {
  // Drawn rows go through the host: the engine copies their logits there, counted as host round
  // trips of the backend's fallback policy.
  if (!r.greedy) return Support::host_fallback("sampling at temperature > 0 runs on the host");
  return Support::native();
}

Status Sampling::argmax(const ArgmaxArgs& a) {
  const SampleRequest r = describe(a);
  auto req = [&] { return r.describe(); };  // for an error's text only
  if (const Support s = supports(r); !s.runs_natively()) return declined("vulkan", req(), s.constraint);
  if (!a.logits.defined() || !a.ids.defined()) return invalid_argument(req() + ": logits or ids missing");
  if (a.logits.device().kind != a.ids.device().kind)
    return invalid_argument(req() + ": logits and ids must be on the same device");
  const bool host = a.logits.device().kind == DeviceKind::kHost;
  Tensor logits = a.logits, ids = a.ids;
  if (host) {
    if (!a.logits.is_contiguous() || !a.ids.is_contiguous())
      return invalid_argument(req() + ": host logits and ids must be contiguous");
    if (a.logits.dtype() != DType::kF32 || a.ids.dtype() != DType::kI32)
      return invalid_argument(req() + ": logits must be f32 and ids i32");
    Storage storage(ctx_);
    KILN_ASSIGN_OR_RETURN(logits, storage.upload(a.logits));
    KILN_ASSIGN_OR_RETURN(ids, storage.empty(a.ids.shape(), DType::kI32));
  }
  if (!validate(ArgmaxArgs{logits, ids}, DeviceKind::kVulkan, std::string()).ok())
    return validate(ArgmaxArgs{logits, ids}, DeviceKind::kVulkan, req());
  struct {
    uint64_t logits, ids;
    uint32_t vocab, stride;
  } p{address(logits), address(ids), static_cast<uint32_t>(logits.dim(1)), static_cast<uint32_t>(logits.stride(0))};
  KILN_RETURN_IF_ERROR(ctx_->dispatch("argmax", p, ctx_->grid(static_cast<uint64_t>(logits.dim(0)))));
  if (host) KILN_RETURN_IF_ERROR(ctx_->download(locate(ids), a.ids.raw(), a.ids.nbytes()));
  return {};
}

}  // namespace kiln::vulkan
