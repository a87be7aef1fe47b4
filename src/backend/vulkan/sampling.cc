// Greedy selection on the device (shaders/argmax.comp): only the ids come back to the host.
#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Sampling::supports(const SampleRequest& r) const {
  if (!r.greedy) return Support::declined("sampling at temperature > 0 runs on the host");
  return Support::native();
}

Status Sampling::argmax(const ArgmaxArgs& a) {
  KILN_RETURN_IF_ERROR(check_args(*this, a).status());
  struct {
    uint64_t logits, ids;
    uint32_t vocab, stride;
  } p{address(a.logits), address(a.ids), static_cast<uint32_t>(a.logits.dim(1)),
      static_cast<uint32_t>(a.logits.stride(0))};
  return ctx_->dispatch("argmax", p, ctx_->grid(static_cast<uint64_t>(a.logits.dim(0))));
}

}  // namespace kiln::vulkan
