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

}  // namespace
}  // namespace kiln
