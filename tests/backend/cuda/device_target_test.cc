// What KILN_CUDA_TARGET makes of a device: resolve_target on the facts an H200 and an RTX 4090
// report, against the CUDA programming guide's table (no device needed).
#include <gtest/gtest.h>

#include "backend/cuda/device_target.h"

namespace kiln::cuda {
namespace {

DeviceFacts h200() { return {"NVIDIA H200", 9, 0, 132, 232448, 60 * 1024 * 1024}; }

TEST(CudaTarget, TheDeviceItselfKeepsItsPropertiesAndHopperFeaturesNeedSm90aCode) {
  auto t = resolve_target(h200(), "", true);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ(t->major, 9);
  EXPECT_EQ(t->minor, 0);
  EXPECT_EQ(t->shared_optin, 232448);  // 227 KB
  EXPECT_EQ(t->multiprocessors, 132);
  EXPECT_TRUE(t->sm90_features);
  EXPECT_EQ(t->label(), "sm_90a");
  // A build without sm_90a machine code has no wgmma kernels to launch.
  EXPECT_FALSE(resolve_target(h200(), "", false)->sm90_features);
  // Neither has a newer architecture: the wgmma kernels are sm_90a's alone.
  EXPECT_FALSE(resolve_target({"RTX 5090", 12, 0, 170, 101376, 96 << 20}, "", true)->sm90_features);
}

TEST(CudaTarget, EmulationNarrowsCapabilityAndSharedMemoryAndDropsSm90Features) {
  auto a100 = resolve_target(h200(), "sm80", true);
  ASSERT_TRUE(a100.ok());
  EXPECT_EQ(a100->major, 8);
  EXPECT_EQ(a100->minor, 0);
  EXPECT_EQ(a100->shared_optin, 166912);  // 163 KB
  EXPECT_FALSE(a100->sm90_features);
  EXPECT_EQ(a100->label(), "sm_80 (emulated on sm_90)");
  for (const char* name : {"sm86", "sm89", "sm120"}) {
    auto t = resolve_target(h200(), name, true);
    ASSERT_TRUE(t.ok()) << name;
    EXPECT_EQ(t->shared_optin, 101376) << name;  // 99 KB
    EXPECT_FALSE(t->sm90_features) << name;
    EXPECT_EQ(t->emulated, name);
    EXPECT_EQ(t->multiprocessors, 132) << name;  // the device's: only the limits are narrowed
  }
  EXPECT_EQ(resolve_target(h200(), "sm89", true)->minor, 9);
  EXPECT_EQ(resolve_target(h200(), "sm120", true)->major, 12);
}

TEST(CudaTarget, AnEmulatedTargetNeverExceedsTheDevice) {
  // sm80 on a 99 KB device keeps the device's 99 KB.
  auto t = resolve_target({"RTX 4090", 8, 9, 128, 101376, 72 << 20}, "sm80", true);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->shared_optin, 101376);
}

TEST(CudaTarget, UnknownTargetsAreRefusedNamingTheVariable) {
  for (const char* bad : {"sm70", "sm90", "sm_86", "86", "hopper"}) {
    auto t = resolve_target(h200(), bad, true);
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(std::string("KILN_CUDA_TARGET=") + bad), std::string::npos);
    EXPECT_NE(t.status().message().find("sm80, sm86, sm89 or sm120"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::cuda
