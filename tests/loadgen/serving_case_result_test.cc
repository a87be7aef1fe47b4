// The case result `kiln bench serve` writes passes the qualification runner's own check against
// the committed serving workload, and reports failure when a request failed.
#include "loadgen/serving_case_result.h"

#include <gtest/gtest.h>

#include "qualify/case_result.h"
#include "qualify/strict_json.h"
#include "qualify/workload.h"

namespace kiln::loadgen {
namespace {

const std::string kWorkload = std::string(KILN_SOURCE_DIR) + "/qualification/workloads/serving-cuda-performance-v2.json";

LoadResult known_result() {
  LoadResult r;
  r.concurrency = 8;
  r.requests = 64;
  r.duration_s = 2.0;
  r.output_tokens = 1000;
  r.ttft_ms = summarize({10, 20, 30});
  r.inter_token_latency_ms = summarize({1, 2, 3, 4});
  return r;
}

nlohmann::json variant_config() { return {{"backend", "cuda"}, {"dtype", "bf16"}, {"prompt_set", "serving-v1"}}; }

struct Checked {
  qualify::CaseResult result;
  qualify::Issues issues;
};

Checked check_against_workload(const nlohmann::json& doc, const std::string& case_id) {
  Checked c;
  Result<qualify::Workload> w = qualify::load_workload(kWorkload);
  EXPECT_TRUE(w.ok()) << w.status().to_string();
  if (!w.ok()) return c;
  const qualify::Variant* v = w->find_variant("cuda");
  EXPECT_NE(v, nullptr);
  if (v == nullptr) return c;
  for (const qualify::WorkloadCase& wc : v->cases) {
    if (wc.id == case_id) c.result = qualify::check_case_result(doc.dump(2), wc, v->effective_config, c.issues);
  }
  return c;
}

TEST(ServingCaseResult, CaseIdsMatchTheWorkload) {
  Result<qualify::Workload> w = qualify::load_workload(kWorkload);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const qualify::Variant* v = w->find_variant("cuda");
  ASSERT_NE(v, nullptr);
  ASSERT_EQ(v->cases.size(), 3u);
  EXPECT_EQ(v->cases[0].id, serving_case_id(1));
  EXPECT_EQ(v->cases[1].id, serving_case_id(8));
  EXPECT_EQ(v->cases[2].id, serving_case_id(64));
}

TEST(ServingCaseResult, PassesTheRunnersCheckForEveryCase) {
  for (int64_t c : {1, 8, 64}) {
    LoadResult r = known_result();
    r.concurrency = c;
    Checked checked = check_against_workload(serving_case_result(r, serving_case_id(c), variant_config()), serving_case_id(c));
    EXPECT_TRUE(checked.issues.empty()) << checked.issues.to_string();
    EXPECT_EQ(checked.result.status, "passed");
    ASSERT_EQ(checked.result.metrics.size(), 5u);
    EXPECT_EQ(checked.result.metrics[0].name, "inter_token_latency_p50_ms");
    EXPECT_DOUBLE_EQ(checked.result.metrics[0].value, 2.5);
    EXPECT_EQ(checked.result.metrics[2].name, "output_tokens_per_second");
    EXPECT_DOUBLE_EQ(checked.result.metrics[2].value, 500.0);
    EXPECT_EQ(checked.result.metrics[2].unit, "tok/s");
    EXPECT_EQ(checked.result.metrics[3].name, "ttft_p50_ms");
    EXPECT_DOUBLE_EQ(checked.result.metrics[3].value, 20.0);
  }
}

TEST(ServingCaseResult, FailedRequestsOrMissingTokensFailTheCase) {
  LoadResult errors = known_result();
  errors.errors = 1;
  errors.first_error = "request 3 (prompt s004): HTTP 503: queue full";
  Checked checked = check_against_workload(serving_case_result(errors, "serve-c8", variant_config()), "serve-c8");
  EXPECT_TRUE(checked.issues.empty()) << checked.issues.to_string();
  EXPECT_EQ(checked.result.status, "failed");

  LoadResult silent = known_result();
  silent.requests_without_tokens = 2;
  EXPECT_FALSE(serving_case_passed(silent));
  EXPECT_FALSE(serving_case_passed(LoadResult{}));  // nothing ran

  // No successful request at all: latencies are 0, still a well-formed document.
  LoadResult none;
  none.requests = 8;
  none.errors = 8;
  checked = check_against_workload(serving_case_result(none, "serve-c8", variant_config()), "serve-c8");
  EXPECT_TRUE(checked.issues.empty()) << checked.issues.to_string();
  EXPECT_EQ(checked.result.status, "failed");
}

TEST(ServingCaseResult, OtherConfigurationOrCaseIsRejectedByTheRunner) {
  nlohmann::json f32 = variant_config();
  f32["dtype"] = "f32";
  Checked checked = check_against_workload(serving_case_result(known_result(), "serve-c8", f32), "serve-c8");
  EXPECT_TRUE(checked.issues.has("$.effective_config", "effective-config")) << checked.issues.to_string();
  checked = check_against_workload(serving_case_result(known_result(), "serve-c1", variant_config()), "serve-c8");
  EXPECT_TRUE(checked.issues.has("$.case_id", "case-id")) << checked.issues.to_string();
}

// The strict reader refuses a number not in its shortest round-tripping form; nlohmann's dump
// writes 0.358765423 (358765423 ns in seconds) as 0.35876542300000003. The canonical text reads
// back, value for value.
TEST(ServingCaseResult, CanonicalTextHasOnlyRoundTrippingNumbers) {
  const double s = 358765423 / 1e9;
  nlohmann::json doc = {{"a", s}, {"b", {1.5, 2.0, -0.1, 1e-300, 12345678901234.5}}, {"c", 7}, {"d", "x 0.1"},
                        {"e", nlohmann::json::object()}, {"f", nlohmann::json::array()}};
  ASSERT_FALSE(qualify::parse_strict_json(doc.dump(2)).ok()) << "nlohmann's own text should trip the reader here";
  const std::string text = canonical_json_text(doc);
  auto parsed = qualify::parse_strict_json(text);
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string() << "\n" << text;
  EXPECT_EQ(nlohmann::json::parse(text), doc);
}

}  // namespace
}  // namespace kiln::loadgen
