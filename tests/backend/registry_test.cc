#include <gtest/gtest.h>

#include "backend/registry.h"

namespace kiln {
namespace {

TEST(Registry, ListsEveryKnownBackendOnce) {
  std::vector<std::string> names;
  for (const auto& e : backend_registry()) names.push_back(e.name);
  EXPECT_EQ(names, (std::vector<std::string>{"cpu", "cuda", "vulkan", "rocm", "metal"}));
}

TEST(Registry, UnbuiltBackendsAreListedNotBuilt) {
  for (const auto& e : backend_registry()) {
    if (e.name == "cpu") {
      EXPECT_TRUE(e.built);
    }
#ifdef KILN_HAVE_VULKAN
    if (e.name == "vulkan") {
      EXPECT_TRUE(e.built);
    }
#endif
    if (
#ifndef KILN_HAVE_VULKAN
        e.name == "vulkan" ||
#endif
        e.name == "rocm" || e.name == "metal") {
      EXPECT_FALSE(e.built) << e.name;
      auto b = create_backend(e.name);
      ASSERT_FALSE(b.ok());
      EXPECT_EQ(b.status().code(), ErrorCode::kUnsupported);
      EXPECT_NE(b.status().message().find("not built"), std::string::npos);
    }
  }
}

TEST(Registry, UnknownBackendNamesTheKnownOnes) {
  auto b = create_backend("tpu");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(b.status().message().find("'tpu'"), std::string::npos);
  EXPECT_NE(b.status().message().find("cpu, cuda"), std::string::npos);
}

TEST(Registry, CpuBackendIdentityAndCapabilities) {
  auto b = create_backend("cpu");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const Backend& be = *b.value();
  EXPECT_EQ(be.identity().name, "cpu");
  EXPECT_GE(be.identity().threads, 1);
  EXPECT_TRUE(be.capabilities().gdn.chunked_prefill);
  EXPECT_TRUE(be.capabilities().storage.zero_copy_host_weights);
  EXPECT_EQ(be.capabilities().fallback.generic_op, FallbackMode::kReference);
}

// `auto` takes a GPU backend only where its device is a GPU: with no CUDA device and no Vulkan GPU
// (lavapipe, a CPU driver, at most: CI's machines) it serves on the CPU backend, and says nothing
// of the devices that are simply absent.
TEST(Registry, AutoTakesAGpuOrTheCpuNeverACpuVulkanDriver) {
  std::vector<std::string> notes;
  auto b = create_auto_backend(BackendOptions{}, notes);
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  const BackendIdentity& id = b.value()->identity();
  EXPECT_TRUE(id.warning.empty()) << id.name << ": " << id.warning;
  auto vulkan = create_backend("vulkan");
  auto cuda = create_backend("cuda");
  if (!cuda.ok() && (!vulkan.ok() || !vulkan.value()->identity().warning.empty())) {
    EXPECT_EQ(id.name, "cpu");
    EXPECT_TRUE(notes.empty()) << notes.front();
  }
}

}  // namespace
}  // namespace kiln
