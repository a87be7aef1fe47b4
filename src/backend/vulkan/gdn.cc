#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Gdn::supports(const GdnRequest& r) const { return Support::declined("no vulkan gdn shader yet"); }
Status Gdn::delta_rule(const GdnArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
