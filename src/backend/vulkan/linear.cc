#include "backend/vulkan/vulkan_facets.h"

namespace kiln::vulkan {

Support Linear::supports(const MatmulRequest& r) const { return Support::declined("no vulkan matmul shader yet"); }
Status Linear::matmul(const MatmulArgs& a) { return check_args(*this, a).status(); }

}  // namespace kiln::vulkan
