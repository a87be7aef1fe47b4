// The mismatch audit passes on the CPU backend and catches a deliberately broken predicate.
#include <gtest/gtest.h>

#include "backend/registry.h"
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

class BrokenBackend final : public Backend {
 public:
  explicit BrokenBackend(std::unique_ptr<Backend> b) : b_(std::move(b)), gdn_(b_->gdn()) {}
  const BackendIdentity& identity() const override { return b_->identity(); }
  const BackendCapabilities& capabilities() const override { return b_->capabilities(); }
  StorageFacet& storage() override { return b_->storage(); }
  LinearFacet& linear() override { return b_->linear(); }
  NormFacet& norm() override { return b_->norm(); }
  AttentionFacet& attention() override { return b_->attention(); }
  ConvFacet& conv() override { return b_->conv(); }
  GdnFacet& gdn() override { return gdn_; }
  ElementwiseFacet& elementwise() override { return b_->elementwise(); }
  SamplingFacet& sampling() override { return b_->sampling(); }
  TrainingFacet& training() override { return b_->training(); }
  OptimizerFacet& optimizer() override { return b_->optimizer(); }

 private:
  std::unique_ptr<Backend> b_;
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
