// `kiln qualify compare`: tolerance arithmetic per operator, the compatibility gates (workload
// bytes, source, model identity, environment, pairing) and failed rows that are never compared.
#include <gtest/gtest.h>

#include "qualify/compare.h"
#include "qualify/receipt_fixtures.h"

namespace kiln::qualify {
namespace {

using Json = nlohmann::ordered_json;

TEST(ToleranceArithmetic, ToleranceIsTheLargerOfAbsoluteAndRelative) {
  EXPECT_DOUBLE_EQ(rule_tolerance(100.0, 1.0, 0.05), 5.0);
  EXPECT_DOUBLE_EQ(rule_tolerance(10.0, 1.0, 0.05), 1.0);
  EXPECT_DOUBLE_EQ(rule_tolerance(-40.0, 0.0, 0.1), 4.0);
}

TEST(ToleranceArithmetic, ViolationPerOperator) {
  EXPECT_DOUBLE_EQ(rule_violation("equal", 10.0, 12.5), 2.5);
  EXPECT_DOUBLE_EQ(rule_violation("equal", 10.0, 7.5), 2.5);
  EXPECT_DOUBLE_EQ(rule_violation("not_greater", 10.0, 12.5), 2.5);
  EXPECT_DOUBLE_EQ(rule_violation("not_greater", 10.0, 7.5), 0.0);
  EXPECT_DOUBLE_EQ(rule_violation("not_less", 10.0, 7.5), 2.5);
  EXPECT_DOUBLE_EQ(rule_violation("not_less", 10.0, 12.5), 0.0);
}

Workload manifest(const std::string& text) {
  WorkloadCheck c = check_workload_text(text);
  EXPECT_TRUE(c.issues.empty()) << c.issues.to_string();
  return c.workload;
}

Workload correctness_manifest() { return manifest(testing::read_text(testing::fixture_path("correctness"))); }

void set_error(Json& r, double v) { r["results"][0]["metrics"][2]["value"] = v; }

const ComparisonRow* row(const Comparison& c, const std::string& metric) {
  for (const ComparisonRow& r : c.rows) {
    if (r.metric == metric) return &r;
  }
  return nullptr;
}

TEST(CrossBackend, EqualWithinAbsoluteToleranceHolds) {
  Json cpu = testing::cpu_receipt(), cuda = testing::cuda_receipt();
  set_error(cpu, 0.0005);
  set_error(cuda, 0.0012);  // |0.0012 - 0.0005| = 0.0007 <= 0.001
  Comparison c = compare_receipts(testing::parsed(cpu), testing::parsed(cuda), correctness_manifest());
  ASSERT_TRUE(c.compatible()) << comparison_to_text(c);
  const ComparisonRow* r = row(c, "max_abs_error");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->status, "passed");
  EXPECT_NEAR(r->violation, 0.0007, 1e-12);
  EXPECT_DOUBLE_EQ(r->tolerance, 0.001);
  EXPECT_EQ(row(c, "case_pass")->status, "passed");
  EXPECT_TRUE(c.holds());
}

TEST(CrossBackend, EqualBeyondToleranceFails) {
  Json cpu = testing::cpu_receipt(), cuda = testing::cuda_receipt();
  set_error(cuda, 0.0020);  // violation 0.0015 > 0.001
  Comparison c = compare_receipts(testing::parsed(cpu), testing::parsed(cuda), correctness_manifest());
  ASSERT_TRUE(c.compatible());
  EXPECT_EQ(row(c, "max_abs_error")->status, "failed");
  EXPECT_FALSE(c.holds());
}

TEST(CrossBackend, UndeclaredEnvironmentDifferenceIsIncompatible) {
  Json cuda = testing::cuda_receipt();
  cuda["environment"]["os"]["release"] = "6.8.0";  // the policy allows device and driver only
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("environment differs in os"), std::string::npos) << comparison_to_text(c);
}

TEST(CrossBackend, ReversedPairIsNotDeclared) {
  Comparison c = compare_receipts(testing::parsed(testing::cuda_receipt()), testing::parsed(testing::cpu_receipt()),
                                  correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("(cuda, cpu) is not a declared backend pair"), std::string::npos);
}

TEST(Compatibility, DifferentSourceTreesAreIncompatible) {
  Json cuda = testing::cuda_receipt();
  cuda["source"]["tree_hash"] = "sha256:" + std::string(64, '9');
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_TRUE(c.rows.empty());
  EXPECT_NE(comparison_to_text(c).find("source trees differ"), std::string::npos);
}

TEST(Compatibility, ModelIdentityNotLabelDecides) {
  Json cuda = testing::cuda_receipt();
  cuda["model"]["id"] = "renamed-copy";
  EXPECT_TRUE(compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest())
                  .compatible());
  cuda["model"]["weight_files"][0]["sha256"] = std::string(64, '7');
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("model identities differ"), std::string::npos);
}

TEST(Compatibility, OtherWorkloadBytesAreIncompatible) {
  Json cuda = testing::cuda_receipt();
  cuda["workload"]["sha256"] = "sha256:" + std::string(64, 'a');
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("manifest's bytes"), std::string::npos);
}

TEST(CrossBackend, ExecutionParametersMayDifferButSeedsMayNot) {
  Json cuda = testing::cuda_receipt();
  cuda["workload"]["parameters"]["threads"] = 8;  // each machine builds and tests its own way
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_TRUE(c.compatible()) << comparison_to_text(c);
  cuda["workload"]["seed"] = 12345;
  c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("seeds differ"), std::string::npos);
}

TEST(Compatibility, MetricDefinedDifferentlyIsIncompatible) {
  Json cuda = testing::cuda_receipt();
  cuda["results"][0]["metrics"][2]["unit"] = "rel";
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("parity/max_abs_error differently"), std::string::npos);
}

TEST(Compatibility, ReceiptMustRecordItsVariantsConfiguration) {
  Json cuda = testing::cuda_receipt();
  cuda["effective_config"]["dtype"] = "bf16";
  EXPECT_FALSE(compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest())
                   .compatible());
}

TEST(FailedRows, AreNeverCompared) {
  Json cuda = testing::cuda_receipt();
  cuda["qualification"]["verdict"] = "failed";
  cuda["results"][0]["status"] = "failed";
  set_error(cuda, 0.0005);  // numerically identical, but the row failed
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  ASSERT_TRUE(c.compatible());
  EXPECT_EQ(row(c, "max_abs_error")->status, "failed_row");
  EXPECT_FALSE(c.holds());
}

TEST(FailedRows, MissingRequiredMetricFails) {
  Json cuda = testing::cuda_receipt();
  cuda["results"][0]["metrics"].erase(2);
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(cuda), correctness_manifest());
  ASSERT_TRUE(c.compatible());
  EXPECT_EQ(row(c, "max_abs_error")->status, "missing");
  EXPECT_FALSE(c.holds());
}

// A/B and same-environment policies over the performance fixture.
struct PerfSetup {
  std::string text;
  Workload workload;
};

PerfSetup ab_manifest() {
  PerfSetup s;
  s.text = testing::read_text(testing::fixture_path("ab"));
  s.workload = manifest(s.text);
  return s;
}

Json perf_receipt(const PerfSetup& s, const std::string& variant, double tokens_per_second) {
  Json r = testing::cpu_receipt();
  r["receipt_id"] = "fixture-ab-v1." + variant + ".20260728t140000z.00000001";
  r["qualification"]["kind"] = "performance";
  r["qualification"]["profile"] = variant;
  r["workload"] = {{"id", "fixture-ab-v1"}, {"sha256", testing::digest_of(s.text)}, {"seed", 11}, {"parameters", {{"precision", "bf16"}}}};
  r["effective_config"] = {{"batch", variant == "batch1" ? 1 : 8}, {"kv", {{"block", 16}}}};
  r["results"][0] = {{"id", "decode"}, {"required", true}, {"status", "passed"}, {"duration_seconds", 3.0},
                     {"metrics", Json::array({Json{{"name", "tokens_per_second"}, {"value", tokens_per_second}, {"unit", "tok/s"},
                                                    {"aggregation", "mean"}, {"lower_is_better", false}}})},
                     {"details", Json::object()}};
  return r;
}

TEST(DeclaredAb, NotLessWithRelativeTolerance) {
  PerfSetup s = ab_manifest();
  Receipt base = testing::parsed(perf_receipt(s, "batch1", 100.0));
  Comparison within = compare_receipts(base, testing::parsed(perf_receipt(s, "batch8", 96.0)), s.workload);
  ASSERT_TRUE(within.compatible()) << comparison_to_text(within);
  EXPECT_DOUBLE_EQ(within.rows[0].violation, 4.0);
  EXPECT_DOUBLE_EQ(within.rows[0].tolerance, 5.0);
  EXPECT_TRUE(within.holds());
  Comparison beyond = compare_receipts(base, testing::parsed(perf_receipt(s, "batch8", 94.0)), s.workload);
  EXPECT_EQ(beyond.rows[0].status, "failed");
  Comparison faster = compare_receipts(base, testing::parsed(perf_receipt(s, "batch8", 400.0)), s.workload);
  EXPECT_DOUBLE_EQ(faster.rows[0].violation, 0.0);
  EXPECT_TRUE(faster.holds());
}

TEST(DeclaredAb, DifferentParametersAreIncompatible) {
  PerfSetup s = ab_manifest();
  Json other = perf_receipt(s, "batch8", 100);
  other["workload"]["parameters"]["precision"] = "f32";
  Comparison c = compare_receipts(testing::parsed(perf_receipt(s, "batch1", 100)), testing::parsed(other), s.workload);
  EXPECT_FALSE(c.compatible());
  EXPECT_NE(comparison_to_text(c).find("workload parameters differ"), std::string::npos);
}

TEST(DeclaredAb, PairsOutsideThePolicyAndOtherMachinesAreIncompatible) {
  PerfSetup s = ab_manifest();
  EXPECT_FALSE(compare_receipts(testing::parsed(perf_receipt(s, "batch8", 1)), testing::parsed(perf_receipt(s, "batch1", 1)),
                                s.workload)
                   .compatible());
  Json other_host = perf_receipt(s, "batch8", 100);
  other_host["environment"]["host_id"] = "other-box";
  EXPECT_FALSE(compare_receipts(testing::parsed(perf_receipt(s, "batch1", 100)), testing::parsed(other_host), s.workload)
                   .compatible());
}

TEST(SameEnvironment, NotGreaterForLatency) {
  Json w = testing::load_fixture("ab");
  for (auto& v : w["variants"]) {
    v["cases"][0]["result_protocol"]["declared_metrics"][0] =
        Json{{"name", "ttft_ms"}, {"unit", "ms"}, {"aggregation", "mean"}, {"lower_is_better", true}};
  }
  w["comparison_policy"] = {{"mode", "same_environment_performance"}, {"variant_pairs", Json::array()},
                            {"backend_pairs", Json::array()}, {"allowed_environment_differences", Json::array()},
                            {"metric_rules", Json::array({Json{{"result_id", "decode"}, {"metric", "ttft_ms"}, {"class", "performance"},
                                                               {"unit", "ms"}, {"aggregation", "mean"}, {"lower_is_better", true},
                                                               {"operator", "not_greater"}, {"absolute_tolerance", 2.0},
                                                               {"relative_tolerance", 0.0}, {"required", true}}})}};
  PerfSetup s;
  s.text = w.dump(2);
  s.workload = manifest(s.text);
  auto latency = [&](double ms) {
    Json r = perf_receipt(s, "batch1", 0);
    r["results"][0]["metrics"][0] = {{"name", "ttft_ms"}, {"value", ms}, {"unit", "ms"}, {"aggregation", "mean"}, {"lower_is_better", true}};
    return testing::parsed(r);
  };
  EXPECT_TRUE(compare_receipts(latency(50), latency(51.5), s.workload).holds());   // 1.5 <= 2
  EXPECT_FALSE(compare_receipts(latency(50), latency(52.5), s.workload).holds());  // 2.5 > 2
  EXPECT_TRUE(compare_receipts(latency(50), latency(10), s.workload).holds());     // faster is fine
  Json other = perf_receipt(s, "batch8", 0);
  other["results"][0]["metrics"][0] = {{"name", "ttft_ms"}, {"value", 50}, {"unit", "ms"}, {"aggregation", "mean"}, {"lower_is_better", true}};
  EXPECT_FALSE(compare_receipts(latency(50), testing::parsed(other), s.workload).compatible());
}

TEST(ComparisonJson, CarriesRowsAndVerdict) {
  Comparison c = compare_receipts(testing::parsed(testing::cpu_receipt()), testing::parsed(testing::cuda_receipt()),
                                  correctness_manifest());
  JsonValue j = comparison_to_json(c);
  EXPECT_TRUE(j.find("compatible")->boolean);
  EXPECT_TRUE(j.find("holds")->boolean);
  EXPECT_EQ(j.find("rows")->array.size(), 2u);
  EXPECT_EQ(j.find("rows")->array[1].find("metric")->string, "max_abs_error");
}

}  // namespace
}  // namespace kiln::qualify
