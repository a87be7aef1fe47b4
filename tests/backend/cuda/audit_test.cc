// The mismatch audit of report/support_audit on the CUDA backend: no predicate contradicted.
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "report/support_audit.h"

namespace kiln {
namespace {

TEST(CudaAudit, NoMismatches) {
  auto be = create_backend("cuda");
  if (!be.ok()) GTEST_SKIP() << "SKIPPED: no CUDA device (" << be.status().to_string() << ")";
  auto rows = audit_support(*be.value());
  EXPECT_GE(rows.size(), 40u);
  for (const auto& r : rows) EXPECT_FALSE(r.mismatch) << r.facet << " " << r.request << ": " << r.problem;
}

}  // namespace
}  // namespace kiln
