// The switch audit on Vulkan (switch_audit.h): KILN_VULKAN_DEVICE and KILN_VULKAN_PROFILE, each set
// alone, leave every natively run request native and serving free of host fallbacks.
#include "backend/switch_audit.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

TEST(VulkanSwitches, NoneTurnsANativeOpIntoAHostFallback) {
  KILN_VULKAN_OR_SKIP(be);
  be.reset();  // each run opens the device itself
  EXPECT_EQ(testing::audit_native_switches("vulkan"), 2);
}

}  // namespace
}  // namespace kiln
