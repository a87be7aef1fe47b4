// The mismatch audit of report/support_audit on the Vulkan backend: no predicate contradicted
// by its method, over every facet.
#include <gtest/gtest.h>

#include "backend/vulkan/vulkan_test_util.h"
#include "report/support_audit.h"

namespace kiln {
namespace {

TEST(VulkanAudit, NoMismatches) {
  KILN_VULKAN_OR_SKIP(be);
  auto rows = audit_support(*be);
  EXPECT_GE(rows.size(), 40u);
  for (const auto& r : rows) EXPECT_FALSE(r.mismatch) << r.facet << " " << r.request << ": " << r.problem;
}

}  // namespace
}  // namespace kiln
