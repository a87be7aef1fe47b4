// `kiln qualify receipt`: each defective receipt is rejected for its rule at its JSON path; the
// --require-* checks hold for a fresh run and fail once the repository disagrees with it.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include "qualify/receipt.h"
#include "qualify/receipt_freshness.h"
#include "qualify/receipt_fixtures.h"
#include "qualify/runner.h"
#include "qualify/temp_repo.h"

namespace kiln::qualify {
namespace {

using Json = nlohmann::ordered_json;

struct BadReceipt {
  const char* name;
  std::function<void(Json&)> mutate;
  const char* path;
  const char* rule;
};

void PrintTo(const BadReceipt& b, std::ostream* os) { *os << b.name; }

Json& q(Json& r) { return r["qualification"]; }

// A version 2 receipt's sandbox with the network cut `how` (and `why`); limits by rlimit.
Json sandbox(const char* how, const char* why) {
  return {{"network", {{"policy", "forbidden"}, {"enforcement", how}, {"reason", why ? Json(why) : Json()}}},
          {"processes", {{"limit", 4096}, {"enforcement", "rlimit"}, {"reason", nullptr}}},
          {"memory", {{"limit_bytes", 1 << 30}, {"enforcement", "rlimit"}, {"reason", nullptr}}}};
}
Json& parity(Json& r) { return r["results"][0]; }

const BadReceipt kBad[] = {
    {"unknown_key", [](Json& r) { r["signature"] = "x"; }, "$.signature", "unknown-key"},
    {"missing_notes", [](Json& r) { r.erase("notes"); }, "$.notes", "missing-key"},
    {"schema_version", [](Json& r) { r["schema_version"] = 3; }, "$.schema_version", "schema-version"},
    {"v2_without_sandbox", [](Json& r) { r["schema_version"] = 2; }, "$.sandbox", "missing-key"},
    {"sandbox_in_v1", [](Json& r) { r["sandbox"] = sandbox("network_namespace", nullptr); }, "$.sandbox", "unknown-key"},
    {"sandbox_enforcement_unknown",
     [](Json& r) {
       r["schema_version"] = 2;
       r["sandbox"] = sandbox("firewall", nullptr);
     },
     "$.sandbox.network.enforcement", "enum"},
    {"sandbox_unenforced_without_reason",
     [](Json& r) {
       r["schema_version"] = 2;
       r["sandbox"] = sandbox("unenforced", nullptr);
     },
     "$.sandbox.network.reason", "unenforced-reason"},
    {"receipt_id_upper", [](Json& r) { r["receipt_id"] = "Receipt-1"; }, "$.receipt_id", "receipt-id"},
    {"created_before_finished", [](Json& r) { r["created_at_utc"] = "2026-07-28T14:00:05Z"; }, "$.created_at_utc", "timestamp-order"},
    {"finished_before_started",
     [](Json& r) {
       q(r)["finished_at_utc"] = "2026-07-28T13:59:00Z";
       q(r)["duration_seconds"] = 0;
     },
     "$.qualification.finished_at_utc", "timestamp-order"},
    {"timestamp_with_space", [](Json& r) { q(r)["started_at_utc"] = "2026-07-28 14:00:00Z"; }, "$.qualification.started_at_utc", "timestamp"},
    {"timestamp_without_zone", [](Json& r) { r["created_at_utc"] = "2026-07-28T14:00:11"; }, "$.created_at_utc", "timestamp"},
    {"timestamp_impossible_date", [](Json& r) { r["created_at_utc"] = "2026-02-30T14:00:11Z"; }, "$.created_at_utc", "timestamp"},
    {"duration_inconsistent", [](Json& r) { q(r)["duration_seconds"] = 12.0; }, "$.qualification.duration_seconds", "duration-consistency"},
    {"duration_negative", [](Json& r) { q(r)["duration_seconds"] = -1; }, "$.qualification.duration_seconds", "range"},
    {"passed_with_dirty_tree", [](Json& r) { r["source"]["git_worktree_clean"] = false; }, "$.qualification.verdict", "passed-clean"},
    {"passed_with_failed_required", [](Json& r) { parity(r)["status"] = "failed"; }, "$.qualification.verdict", "passed-results"},
    {"passed_with_skipped_required", [](Json& r) { parity(r)["status"] = "skipped"; }, "$.qualification.verdict", "passed-results"},
    {"passed_without_results", [](Json& r) { r["results"] = Json::array(); }, "$.qualification.verdict", "passed-results"},
    {"failed_without_failure", [](Json& r) { q(r)["verdict"] = "failed"; }, "$.qualification.verdict", "failed-has-failure"},
    {"skipped_without_unsupported",
     [](Json& r) {
       q(r)["verdict"] = "skipped";
       r["results"] = Json::array();
       r["unsupported"] = Json::array();
     },
     "$.qualification.verdict", "skipped-evidence"},
    {"skipped_with_results", [](Json& r) { q(r)["verdict"] = "skipped"; }, "$.qualification.verdict", "skipped-evidence"},
    {"verdict_unknown", [](Json& r) { q(r)["verdict"] = "mostly"; }, "$.qualification.verdict", "enum"},
    {"kind_unknown", [](Json& r) { q(r)["kind"] = "vibes"; }, "$.qualification.kind", "enum"},
    {"backend_unknown", [](Json& r) { q(r)["backend"] = "tpu"; }, "$.qualification.backend", "enum"},
    {"command_empty", [](Json& r) { q(r)["command"] = Json::array(); }, "$.qualification.command", "non-empty"},
    {"result_status_unknown", [](Json& r) { parity(r)["status"] = "ok"; }, "$.results[0].status", "enum"},
    {"result_ids_repeat", [](Json& r) { r["results"][1]["id"] = "parity"; }, "$.results[1].id", "unique"},
    {"result_duration_negative", [](Json& r) { parity(r)["duration_seconds"] = -0.5; }, "$.results[0].duration_seconds", "range"},
    {"metric_value_string", [](Json& r) { parity(r)["metrics"][2]["value"] = "small"; }, "$.results[0].metrics[2].value", "metric-value"},
    {"bool_metric_number", [](Json& r) { parity(r)["metrics"][0]["value"] = 1; }, "$.results[0].metrics[0].value", "metric-value"},
    {"metrics_unsorted", [](Json& r) { std::swap(parity(r)["metrics"][0], parity(r)["metrics"][1]); }, "$.results[0].metrics[1]", "sorted"},
    {"metric_unknown_key", [](Json& r) { parity(r)["metrics"][2]["samples"] = Json::array(); }, "$.results[0].metrics[2].samples", "unknown-key"},
    {"tree_hash_bare", [](Json& r) { r["source"]["tree_hash"] = std::string(64, '1'); }, "$.source.tree_hash", "sha256"},
    {"git_commit_short", [](Json& r) { r["source"]["git_commit"] = "abc123"; }, "$.source.git_commit", "git-commit"},
    {"artifact_path_escapes", [](Json& r) { r["artifacts"][0]["path"] = "../secret"; }, "$.artifacts[0].path", "artifact-path"},
    {"artifact_absolute", [](Json& r) { r["artifacts"][0]["path"] = "/etc/passwd"; }, "$.artifacts[0].path", "artifact-path"},
    {"artifact_sha_short", [](Json& r) { r["artifacts"][0]["sha256"] = "55"; }, "$.artifacts[0].sha256", "sha256"},
    {"artifact_remote", [](Json& r) { r["artifacts"][0]["location"] = "s3"; }, "$.artifacts[0].location", "enum"},
    {"workload_digest_bare", [](Json& r) { r["workload"]["sha256"] = std::string(64, '0'); }, "$.workload.sha256", "sha256"},
    {"seed_string", [](Json& r) { r["workload"]["seed"] = "7"; }, "$.workload.seed", "type"},
    {"host_id_space", [](Json& r) { r["environment"]["host_id"] = "my box"; }, "$.environment.host_id", "host-id"},
    {"device_nested", [](Json& r) { r["environment"]["device"]["name"] = Json{{"vendor", "x"}}; }, "$.environment.device.name", "type"},
    {"device_unknown_field", [](Json& r) { r["environment"]["device"]["temperature_c"] = 60; }, "$.environment.device.temperature_c", "unknown-key"},
    {"model_without_weights", [](Json& r) { r["model"]["weight_files"] = Json::array(); }, "$.model.weight_files", "non-empty"},
    {"model_hash_bare", [](Json& r) { r["model"]["config_hash"] = "abc"; }, "$.model.config_hash", "sha256"},
    {"unsupported_shape", [](Json& r) { r["unsupported"][0] = "driver"; }, "$.unsupported[0]", "type"},
};

class BadReceipts : public ::testing::TestWithParam<BadReceipt> {};

TEST_P(BadReceipts, RejectedForItsRuleAtItsPath) {
  Json r = testing::cpu_receipt();
  GetParam().mutate(r);
  ReceiptCheck c = check_receipt_text(r.dump());
  EXPECT_TRUE(c.issues.has(GetParam().path, GetParam().rule))
      << "expected [" << GetParam().rule << "] at " << GetParam().path << ", got:\n" << c.issues.to_string();
}

INSTANTIATE_TEST_SUITE_P(Spec, BadReceipts, ::testing::ValuesIn(kBad),
                         [](const ::testing::TestParamInfo<BadReceipt>& i) { return std::string(i.param.name); });

TEST(Receipt, FixtureIsValidAndParsed) {
  ReceiptCheck c = check_receipt_text(testing::cpu_receipt().dump());
  ASSERT_TRUE(c.issues.empty()) << c.issues.to_string();
  EXPECT_EQ(c.receipt.verdict, "passed");
  EXPECT_DOUBLE_EQ(c.receipt.duration_seconds, 10.25);
  ASSERT_NE(c.receipt.find_result("parity"), nullptr);
  EXPECT_DOUBLE_EQ(c.receipt.find_result("parity")->find_metric("max_abs_error")->value.number, 0.0005);
}

TEST(Receipt, FailedVerdictWithAFailureIsValid) {
  Json r = testing::cpu_receipt();
  r["qualification"]["verdict"] = "failed";
  r["results"][0]["status"] = "failed";
  EXPECT_TRUE(check_receipt_text(r.dump()).issues.empty());
}

TEST(Receipt, NonFiniteNumbersAreRejectedByTheParser) {
  std::string text = testing::cpu_receipt().dump();
  text.replace(text.find("0.0005"), 6, "NaN");
  ReceiptCheck c = check_receipt_text(text);
  EXPECT_TRUE(c.issues.has("$.results[0].metrics[2].value", "json")) << c.issues.to_string();
}

TEST(Receipt, RequireEnforcedHoldsOnlyWhereTheCasesRanWithoutNetwork) {
  auto enforced_issues = [](const Json& r) {
    ReceiptCheck c = check_receipt_text(r.dump());
    EXPECT_TRUE(c.issues.empty()) << c.issues.to_string();
    ReceiptRequirements req;
    req.enforced = true;
    check_receipt_requirements(c.receipt, req, "/nonexistent", c.issues);
    return c.issues;
  };
  Json v1 = testing::cpu_receipt();
  EXPECT_TRUE(enforced_issues(v1).has("$.sandbox", "enforced")) << "a receipt from before sandboxing enforced nothing";
  Json r = v1;
  r["schema_version"] = 2;
  r["sandbox"] = sandbox("unenforced", "unshare(CLONE_NEWNET): Operation not permitted");
  const Issues open = enforced_issues(r);
  ASSERT_TRUE(open.has("$.sandbox.network.enforcement", "enforced")) << open.to_string();
  EXPECT_NE(open.to_string().find("Operation not permitted"), std::string::npos) << open.to_string();
  for (const char* how : {"network_namespace", "user_namespace"}) {
    r["sandbox"] = sandbox(how, nullptr);
    EXPECT_TRUE(enforced_issues(r).empty()) << how;
  }
}

TEST(CommittedReceipts, ValidateWithRequireKnownCommit) {
  namespace fs = std::filesystem;
  // A copy of the tree without its history (the accelerator machine gets one) cannot know commits.
  if (!fs::exists(std::string(KILN_SOURCE_DIR) + "/.git"))
    GTEST_SKIP() << "SKIPPED: " << KILN_SOURCE_DIR << " is not a git checkout, so no commit can be known";
  std::string dir = std::string(KILN_SOURCE_DIR) + "/qualification/receipts";
  size_t seen = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() != ".json") continue;
    ++seen;
    ReceiptCheck c = check_receipt_text(testing::read_text(e.path().string()));
    EXPECT_TRUE(c.issues.empty()) << e.path() << ":\n" << c.issues.to_string();
    check_receipt_requirements(c.receipt, {false, false, true, false}, KILN_SOURCE_DIR, c.issues);
    EXPECT_TRUE(c.issues.empty()) << e.path() << ":\n" << c.issues.to_string();
    // The workload the receipt names is still committed with the same bytes.
    Result<GitRepo> repo = GitRepo::discover(KILN_SOURCE_DIR);
    ASSERT_TRUE(repo.ok()) << repo.status().to_string();
    const std::string workload = workload_file(*repo, c.receipt.workload_id);
    ASSERT_FALSE(workload.empty()) << e.path() << " names " << c.receipt.workload_id << ", which is not committed";
    EXPECT_EQ(testing::digest_of(testing::read_text(repo->root() + "/" + workload)), c.receipt.workload_sha256)
        << e.path();
  }
  EXPECT_GE(seen, 1u);
}

// --require-* against a real run in a throwaway repository.
class ReceiptRequirementsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repo_.write("src/a.txt", "source\n");
    repo_.write("qualification/workloads/fixture-environment-v1.json", testing::read_text(testing::fixture_path("environment")));
    repo_.commit_all();
    RunRequest req;
    req.workload_path = repo_.path("qualification/workloads/fixture-environment-v1.json");
    req.variant_id = "cpu";
    req.host_id = "h1";
    req.command = {"kiln"};
    Result<RunOutcome> out = run_workload(req);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ReceiptCheck c = check_receipt_text(testing::read_text(out->receipt_path));
    ASSERT_TRUE(c.issues.empty()) << c.issues.to_string();
    receipt_ = c.receipt;
  }
  Issues check(ReceiptRequirements req) {
    Issues issues;
    check_receipt_requirements(receipt_, req, repo_.root(), issues);
    return issues;
  }
  testing::TempRepo repo_;
  Receipt receipt_;
};

TEST_F(ReceiptRequirementsTest, FreshRunMeetsAllRequirements) {
  Issues i = check({true, true, true, false});
  EXPECT_TRUE(i.empty()) << i.to_string();
}

// The runner records how the sandbox held, as this platform allows it.
TEST_F(ReceiptRequirementsTest, AFreshReceiptRecordsTheSandbox) {
  ASSERT_TRUE(receipt_.sandbox.is_object());
  const SandboxPlan plan = plan_sandbox({});
  EXPECT_EQ(receipt_.sandbox.find("network")->find("policy")->string, "forbidden");
  EXPECT_EQ(receipt_.sandbox.find("network")->find("enforcement")->string, plan.network.how);
  EXPECT_EQ(receipt_.sandbox.find("processes")->find("limit")->number, 4096);
  EXPECT_EQ(receipt_.sandbox.find("processes")->find("enforcement")->string, plan.processes.how);
  EXPECT_TRUE(receipt_.sandbox.find("memory")->find("limit_bytes")->is_null()) << "the runner's default asks no memory bound";
  ReceiptRequirements req;
  req.enforced = true;
  EXPECT_EQ(check(req).empty(), plan.network.enforced());
}

TEST_F(ReceiptRequirementsTest, UnknownCommitFails) {
  receipt_.git_commit = std::string(40, 'f');
  EXPECT_TRUE(check({false, false, true, false}).has("$.source.git_commit", "known-commit"));
}

// The fixture workload declares no inputs, so any source file counts.
TEST_F(ReceiptRequirementsTest, ChangedSourceFailsCurrentSourceButCommittingAReceiptDoesNot) {
  repo_.write("qualification/receipts/r.json", "{}");
  repo_.commit_all("a receipt is evidence, not source");
  EXPECT_TRUE(check({true, false, false, false}).empty());
  repo_.write("src/a.txt", "changed\n");
  EXPECT_TRUE(check({true, false, false, false}).has("$.source", "current-source"));
  repo_.commit_all("new source");
  Issues committed = check({true, false, false, false});
  ASSERT_TRUE(committed.has("$.source", "current-source"));
  EXPECT_NE(committed.to_string().find("src/a.txt"), std::string::npos) << committed.to_string();
}

TEST_F(ReceiptRequirementsTest, AlteredOrMissingArtifactFails) {
  ASSERT_FALSE(receipt_.artifacts.empty());
  std::string first = repo_.path(receipt_.artifacts[0].path);
  std::ofstream(first, std::ios::app) << "tampered";
  EXPECT_TRUE(check({false, true, false, false}).has("$.artifacts[0].sha256", "local-artifact"));
  std::filesystem::remove(first);
  EXPECT_TRUE(check({false, true, false, false}).has("$.artifacts[0].path", "local-artifact"));
}

}  // namespace
}  // namespace kiln::qualify
