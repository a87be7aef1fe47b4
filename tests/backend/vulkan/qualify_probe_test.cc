// What `kiln qualify run` records of a Vulkan variant's device: the device the backend chooses,
// its target, device-local memory and driver, and "vulkan" as the runtime with its API version.
#include <gtest/gtest.h>

#include "backend/vulkan/vulkan_test_util.h"
#include "qualify/platform_probe.h"

namespace kiln {
namespace {

TEST(VulkanQualifyProbe, RecordsTheDeviceTheBackendChooses) {
  KILN_VULKAN_OR_SKIP(be);
  const qualify::PlatformFacts f = qualify::probe_platform("vulkan");
  ASSERT_TRUE(f.device.available);
  EXPECT_EQ(f.device.count, 1);
  EXPECT_EQ(f.device.name, be->identity().device_name);
  EXPECT_EQ(f.device.architecture, be->capabilities().compute.target);
  EXPECT_EQ(f.device.driver, be->identity().driver);
  EXPECT_FALSE(be->identity().driver.empty());
  ASSERT_TRUE(f.device.memory_bytes.has_value());
  EXPECT_EQ(*f.device.memory_bytes, be->capabilities().storage.device_memory_bytes);
  EXPECT_EQ(f.runtime_name, "vulkan");
  ASSERT_TRUE(f.runtime_version.has_value());
  // "1.3" from "vulkan 1.3, subgroup 8": major.minor.
  EXPECT_EQ(be->capabilities().compute.target.rfind("vulkan " + *f.runtime_version + ",", 0), 0u)
      << be->capabilities().compute.target << " / " << *f.runtime_version;
}

}  // namespace
}  // namespace kiln
