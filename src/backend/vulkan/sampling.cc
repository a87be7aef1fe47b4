#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Sampling::supports(const SampleRequest& r) const { return Support::declined("no vulkan argmax shader yet"); }
Status Sampling::argmax(const ArgmaxArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
