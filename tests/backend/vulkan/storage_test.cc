// The Vulkan storage facet: uploads and downloads (past the staging ring too), device copies,
// zeroing (whole words and odd spans), and a pool that reuses what was released.
#include <gtest/gtest.h>

#include <numeric>

#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using testing::to_device;
using testing::to_host;

TEST(VulkanStorage, UploadDownloadRoundTripsEveryByte) {
  KILN_VULKAN_OR_SKIP(be);
  std::vector<float> v(1000);
  std::iota(v.begin(), v.end(), -3.5f);
  Tensor host = Tensor::from_values(v, {10, 100});
  Tensor dev = to_device(*be, host);
  EXPECT_EQ(dev.device().kind, DeviceKind::kVulkan);
  Tensor back = to_host(*be, dev);
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(back.data<float>()[i], v[i]) << i;
}

TEST(VulkanStorage, TransfersLargerThanTheStagingRingArriveWhole) {
  KILN_VULKAN_OR_SKIP(be);
  const int64_t n = (int64_t{40} << 20) / 4;  // 40 MiB: past the 32 MiB ring
  Tensor host = Tensor::empty({n}, DType::kI32);
  for (int64_t i = 0; i < n; ++i) host.data<int32_t>()[i] = static_cast<int32_t>(i * 7 + 1);
  Tensor dev = to_device(*be, host);
  Tensor back = to_host(*be, dev);
  for (int64_t i = 0; i < n; i += 4099) ASSERT_EQ(back.data<int32_t>()[i], i * 7 + 1) << i;
  EXPECT_EQ(back.data<int32_t>()[n - 1], (n - 1) * 7 + 1);
}

TEST(VulkanStorage, AllocateZeroesAndZeroClearsOddSpans) {
  KILN_VULKAN_OR_SKIP(be);
  auto t = be->storage().allocate({3, 5}, DType::kBF16);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  Tensor ones = Tensor::empty({3, 5}, DType::kBF16);
  for (int i = 0; i < 15; ++i) ones.data<uint16_t>()[i] = 0x3f80;
  Tensor h = to_host(*be, t.value());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(h.data<uint16_t>()[i], 0) << i;
  ASSERT_TRUE(be->storage().copy_from_host(ones, t.value()).ok());
  // Row 1 alone: 10 bytes at an offset of 10, neither a whole number of 4-byte words.
  ASSERT_TRUE(be->storage().zero(t.value().slice(0, 1, 2)).ok());
  h = to_host(*be, t.value());
  for (int i = 0; i < 15; ++i) EXPECT_EQ(h.data<uint16_t>()[i], i >= 5 && i < 10 ? 0 : 0x3f80) << i;
}

TEST(VulkanStorage, DeviceCopyAndMismatchesNamed) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor a = to_device(*be, Tensor::from_values(std::vector<float>{1, 2, 3, 4}, {4}));
  Tensor b = be->storage().allocate({4}, DType::kF32).value();
  ASSERT_TRUE(be->storage().copy(a, b).ok());
  Tensor h = to_host(*be, b);
  EXPECT_EQ(h.data<float>()[3], 4.f);
  Tensor c = be->storage().allocate({5}, DType::kF32).value();
  Status s = be->storage().copy(a, c);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("f32[4]"), std::string::npos) << s.to_string();
}

// Copies of whole 16-byte words at 16-byte addresses run as a shader (one dispatch); the rest as
// a transfer command (no dispatch). Both land every byte, and nothing past the span.
TEST(VulkanStorage, AlignedCopiesRunAsAShaderAndOddOnesAsATransfer) {
  KILN_VULKAN_OR_SKIP(be);
  const int64_t n = 4099;
  std::vector<float> v(n);
  std::iota(v.begin(), v.end(), 0.5f);
  Tensor a = to_device(*be, Tensor::from_values(v, {n}));
  Tensor b = be->storage().allocate({n}, DType::kF32).value();
  const uint64_t before = vulkan_backend_stats(*be).value().dispatches;
  ASSERT_TRUE(be->storage().copy(a.slice(0, 0, 4096), b.slice(0, 0, 4096)).ok());
  EXPECT_EQ(vulkan_backend_stats(*be).value().dispatches, before + 1);
  // Three floats at an offset of one: neither the addresses nor the size are 16-byte multiples.
  ASSERT_TRUE(be->storage().copy(a.slice(0, 4096, 4099), b.slice(0, 4096, 4099)).ok());
  EXPECT_EQ(vulkan_backend_stats(*be).value().dispatches, before + 1);
  Tensor h = to_host(*be, b);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(h.data<float>()[i], v[i]) << i;
  Tensor c = be->storage().allocate({n}, DType::kF32).value();
  ASSERT_TRUE(be->storage().copy(a.slice(0, 1, 4), c.slice(0, 1, 4)).ok());
  h = to_host(*be, c);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(h.data<float>()[i], i >= 1 && i < 4 ? v[i] : 0.f) << i;
}

TEST(VulkanStorage, ReleasedBlocksAreReusedWithoutAskingTheDriver) {
  KILN_VULKAN_OR_SKIP(be);
  { auto warm = be->storage().allocate({1000}, DType::kF32); }
  const uint64_t before = vulkan_backend_stats(*be).value().memory.driver_allocations;
  for (int i = 0; i < 100; ++i) {
    auto t = be->storage().allocate({1000}, DType::kF32);
    ASSERT_TRUE(t.ok());
  }
  EXPECT_EQ(vulkan_backend_stats(*be).value().memory.driver_allocations, before);
}

TEST(VulkanStorage, IdentityNamesTheDevice) {
  KILN_VULKAN_OR_SKIP(be);
  EXPECT_EQ(be->identity().name, "vulkan");
  EXPECT_FALSE(be->identity().device_name.empty());
  EXPECT_FALSE(be->capabilities().training.supported);
}

// vulkan.device names a device by index or name substring; one that matches none is refused
// naming it and the devices there are.
TEST(VulkanDevice, AChoiceThatMatchesNoneNamesItAndTheDevices) {
  KILN_VULKAN_OR_SKIP(be);
  auto by_index = create_backend("vulkan", BackendOptions{"0", false});
  ASSERT_TRUE(by_index.ok()) << by_index.status().to_string();
  auto none = create_backend("vulkan", BackendOptions{"no-such-gpu", false});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(none.status().message().find("vulkan.device 'no-such-gpu'"), std::string::npos) << none.status().to_string();
  EXPECT_NE(none.status().message().find("0: "), std::string::npos) << none.status().to_string();
}

}  // namespace
}  // namespace kiln
