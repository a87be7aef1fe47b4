#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Conv::supports(const ConvRequest& r) const { return Support::declined("no vulkan conv shader yet"); }
Status Conv::causal_conv1d(const ConvArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
