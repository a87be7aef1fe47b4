// The switch audit on Vulkan (switch_audit.h): KILN_VULKAN_DEVICE, KILN_VULKAN_PROFILE and
// KILN_VULKAN_TILED_PREFILL, each set alone, leave every natively run request native and serving
// free of host fallbacks.
#include "backend/switch_audit.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

TEST(VulkanSwitches, NoneTurnsANativeOpIntoAHostFallback) {
  KILN_VULKAN_OR_SKIP(be);
  be.reset();  // each run opens the device itself
  EXPECT_EQ(testing::audit_native_switches("vulkan"), 3);
}

}  // namespace
}  // namespace kiln
