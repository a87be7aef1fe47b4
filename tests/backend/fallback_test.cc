#include <gtest/gtest.h>

#include "backend/fallback.h"

namespace kiln {
namespace {

const FallbackPolicy kVulkanLike{FallbackMode::kHostRoundTrip, FallbackMode::kNativeRequired,
                                 FallbackMode::kNativeRequired};
const FallbackPolicy kCudaLike{FallbackMode::kStrict, FallbackMode::kNativeRequired, FallbackMode::kNativeRequired};

TEST(Fallback, NativeSupportRunsNativeAndCountsNothing) {
  FallbackCounters::global().reset();
  auto d = resolve_fallback(kCudaLike, "cuda", OpClass::kGenericOp, 2, Support::native(), "matmul m=1");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.value(), FallbackDecision::kRunNative);
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
}

TEST(Fallback, GenericOpRoundTripIsCountedPerBackendAndArity) {
  FallbackCounters::global().reset();
  Support s = Support::host_fallback("no native kernel for this dtype");
  for (int arity : {1, 2, 2, 3}) {
    auto d = resolve_fallback(kVulkanLike, "vulkan", OpClass::kGenericOp, arity, s, "op");
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(d.value(), FallbackDecision::kRunOnHost);
  }
  EXPECT_EQ(FallbackCounters::global().count("vulkan", 1), 1u);
  EXPECT_EQ(FallbackCounters::global().count("vulkan", 2), 2u);
  EXPECT_EQ(FallbackCounters::global().count("vulkan", 3), 1u);
  EXPECT_EQ(FallbackCounters::global().total("vulkan"), 4u);
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);  // attributed to the right backend only
}

TEST(Fallback, HotPathsRequireNative) {
  FallbackCounters::global().reset();
  Support s = Support::host_fallback("no native decode kernel");
  auto d = resolve_fallback(kVulkanLike, "vulkan", OpClass::kDecodeHotPath, 2, s, "attention decode rows=4");
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(d.status().message().find("attention decode rows=4"), std::string::npos);
  EXPECT_NE(d.status().message().find("native_required"), std::string::npos);
  EXPECT_NE(d.status().message().find("no native decode kernel"), std::string::npos);
  EXPECT_EQ(FallbackCounters::global().total("vulkan"), 0u);
}

TEST(Fallback, StrictGenericOpErrorsOnDecline) {
  auto d = resolve_fallback(kCudaLike, "cuda", OpClass::kGenericOp, 1, Support::declined("head_dim 96"), "attention");
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("strict_native_miss_errors"), std::string::npos);
  EXPECT_NE(d.status().message().find("head_dim 96"), std::string::npos);
}

TEST(Fallback, OptimizerClassUsesItsOwnMode) {
  FallbackPolicy p{FallbackMode::kHostRoundTrip, FallbackMode::kHostRoundTrip, FallbackMode::kNativeRequired};
  auto d = resolve_fallback(p, "rocm", OpClass::kTrainingOptimizer, 1, Support::host_fallback("x"), "adamw");
  EXPECT_FALSE(d.ok());
  EXPECT_EQ(p.mode_for(OpClass::kDecodeHotPath), FallbackMode::kHostRoundTrip);
}

}  // namespace
}  // namespace kiln
