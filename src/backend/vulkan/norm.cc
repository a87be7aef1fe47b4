#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Norm::supports(const NormRequest& r) const { return Support::declined("no vulkan norm shader yet"); }
Status Norm::rms_norm(const NormArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
