// What the Vulkan tests share: the backend or a skip; device_test_util.h has the rest.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "backend/device_test_util.h"
#include "backend/registry.h"

// Binds `var` to the Vulkan backend (lavapipe on CI), or skips the test saying why.
#define KILN_VULKAN_OR_SKIP(var)                                                                  \
  auto var##_result = ::kiln::create_backend("vulkan");                                           \
  if (!var##_result.ok())                                                                         \
    GTEST_SKIP() << "SKIPPED: no Vulkan device (" << var##_result.status().to_string() << ")"; \
  std::unique_ptr<::kiln::Backend> var = std::move(var##_result).value()

namespace kiln::testing {

// Whether the backend multiplies 16-bit weights past 8 rows on cooperative matrices (x rounded
// to f16: such products are compared at kCoopTolerance, the rest at the f32 tolerances).
inline bool cooperative_matmul(Backend& be) {
  return be.capabilities().matmul.engine.find("cooperative matrices") != std::string::npos;
}
constexpr double kCoopTolerance = 2e-3;

}  // namespace kiln::testing
