// The mismatch audit passes on the CPU backend and catches a deliberately broken predicate.
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "forwarding_backend.h"
#include "report/support_audit.h"

namespace kiln {
namespace {

TEST(SupportAudit, CpuBackendHasNoMismatches) {
  auto be = std::move(create_backend("cpu").value());
  auto rows = audit_support(*be);
  EXPECT_GE(rows.size(), 40u);
  for (const auto& r : rows) EXPECT_FALSE(r.mismatch) << r.facet << " " << r.request << ": " << r.problem;
  int declined = 0;
  for (const auto& r : rows) declined += !r.support.runs_natively();
  EXPECT_GT(declined, 5) << "the audit must exercise declines too";
}

// A backend whose GDN predicate wrongly says yes to bf16 state, which its method refuses.
class LyingGdn final : public GdnFacet {
 public:
  explicit LyingGdn(GdnFacet& real) : real_(real) {}
  Support supports(const GdnRequest& r) const override {
    return r.state_dtype == DType::kBF16 && r.k_heads > 0 && r.v_heads % r.k_heads == 0 ? Support::native()
                                                                                        : real_.supports(r);
  }
  Status delta_rule(const GdnArgs& a) override { return real_.delta_rule(a); }

 private:
  GdnFacet& real_;
};

class BrokenBackend final : public testing::ForwardingBackend {
 public:
  explicit BrokenBackend(std::unique_ptr<Backend> b) : ForwardingBackend(std::move(b)), gdn_(inner().gdn()) {}
  GdnFacet& gdn() override { return gdn_; }

 private:
  LyingGdn gdn_;
};

TEST(SupportAudit, BrokenPredicateIsCaught) {
  BrokenBackend be(std::move(create_backend("cpu").value()));
  auto rows = audit_support(be);
  EXPECT_EQ(count_mismatches(rows), 2);  // chunked and recurrent, bf16 state, valid heads
  for (const auto& r : rows)
    if (r.mismatch) {
      EXPECT_EQ(r.facet, "gdn.delta_rule");
      EXPECT_NE(r.problem.find("predicate says native but the method failed"), std::string::npos) << r.problem;
    }
}

}  // namespace
}  // namespace kiln
