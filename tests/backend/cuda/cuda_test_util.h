// What the CUDA tests share: the backend or a skip; device_test_util.h has the rest.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/registry.h"
#include "backend/device_test_util.h"

namespace kiln::testing {

// Binds `var` to the CUDA backend, or skips the test saying why (CI has no GPU).
#define KILN_CUDA_OR_SKIP(var)                                                                  \
  auto var##_result = ::kiln::create_backend("cuda");                                           \
  if (!var##_result.ok())                                                                       \
    GTEST_SKIP() << "SKIPPED: no CUDA device (" << var##_result.status().to_string() << ")"; \
  std::unique_ptr<::kiln::Backend> var = std::move(var##_result).value()

}  // namespace kiln::testing
