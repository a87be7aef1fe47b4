// The runner against real child processes in throwaway git repositories: deadlines kill the
// whole process group, daemons are caught, capture is bounded, malformed results and silent
// skips fail, refusals happen before anything runs, and receipts are never overwritten.
#include <gtest/gtest.h>
#include <signal.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "qualify/receipt.h"
#include "qualify/runner.h"
#include "core/sha256.h"
#include "qualify/temp_repo.h"
#include "qualify/workload_fixtures.h"

namespace kiln::qualify {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

const std::string kHelper = QUALIFY_CASE_HELPER;

Json make_case(const std::string& id, std::vector<std::string> argv, int timeout = 20) {
  argv.insert(argv.begin(), kHelper);
  return Json{{"id", id},
              {"description", "runner test case " + id},
              {"required", true},
              {"command", argv},
              {"working_directory", "."},
              {"environment", Json::object()},
              {"timeout_seconds", timeout},
              {"expected_exit_codes", {0}},
              {"output_assertions", Json::array()},
              {"result_protocol",
               {{"producer", "runner"},
                {"declared_metrics",
                 Json::array({Json{{"name", "case_pass"}, {"unit", "bool"}, {"aggregation", "all"}, {"lower_is_better", nullptr}}})}}}};
}

Json command_case(const std::string& id, std::vector<std::string> argv) {
  Json c = make_case(id, std::move(argv));
  c["result_protocol"] = {{"producer", "command"},
                          {"declared_metrics",
                           Json::array({Json{{"name", "err"}, {"unit", "abs"}, {"aggregation", "mean"}, {"lower_is_better", true}}})}};
  return c;
}

Json make_workload(const std::vector<Json>& cases, int repetitions = 1) {
  return Json{{"schema_version", 1},
              {"workload_id", "runner-test-v1"},
              {"kind", "environment"},
              {"description", "runner test workload"},
              {"determinism",
               {{"seed", nullptr}, {"seed_delivery", "not_applicable"}, {"repetitions", repetitions},
                {"case_order", "declared"}, {"max_parallel_cases", 1}, {"network_access", "forbidden"}}},
              {"variables", Json::array()},
              {"variants",
               Json::array({Json{{"id", "cpu"},
                                 {"description", "cpu"},
                                 {"backend", "cpu"},
                                 {"device_requirement", "none"},
                                 {"skip_policy", "fail"},
                                 {"effective_config", {{"dtype", "f32"}}},
                                 {"cases", cases}}})},
              {"comparison_policy", nullptr}};
}

class RunnerTest : public ::testing::Test {
 protected:
  // Commits the workload and returns a request for its cpu variant.
  RunRequest commit(const Json& workload) {
    repo_.write("qualification/workloads/runner-test-v1.json", workload.dump(2) + "\n");
    repo_.commit_all();
    RunRequest req;
    req.workload_path = repo_.path("qualification/workloads/runner-test-v1.json");
    req.variant_id = "cpu";
    req.host_id = "test-host";
    req.command = {"kiln", "qualify", "run"};
    req.limits.interrupt_grace_seconds = 0.3;
    req.limits.terminate_grace_seconds = 0.3;
    return req;
  }

  // Runs and returns the parsed receipt; fails the test when the run is refused.
  ReceiptCheck run_ok(const RunRequest& req, RunOutcome* outcome = nullptr) {
    Result<RunOutcome> out = run_workload(req);
    EXPECT_TRUE(out.ok()) << out.status().to_string();
    if (!out.ok()) return {};
    if (outcome) *outcome = *out;
    ReceiptCheck check = check_receipt_text(testing::read_text(out->receipt_path));
    EXPECT_TRUE(check.issues.empty()) << check.issues.to_string();
    EXPECT_EQ(check.receipt.verdict, out->verdict);
    return check;
  }

  static bool alive(int pid) { return pid > 0 && (kill(pid, 0) == 0 || errno != ESRCH); }
  static int read_pid(const std::string& path) {
    int pid = 0;
    std::ifstream(path) >> pid;
    return pid;
  }
  bool receipts_empty() const {
    std::error_code ec;
    return !fs::exists(repo_.path(".qualification/receipts"), ec) || fs::is_empty(repo_.path(".qualification/receipts"), ec);
  }
  bool runs_empty() const {
    std::error_code ec;
    return !fs::exists(repo_.path(".qualification/runs"), ec) || fs::is_empty(repo_.path(".qualification/runs"), ec);
  }

  testing::TempRepo repo_;
};

TEST_F(RunnerTest, PassingRunWritesAValidReceiptWithEvidence) {
  RunOutcome out;
  ReceiptCheck c = run_ok(commit(make_workload({make_case("hello", {"print", "stdout", "hello"})})), &out);
  const Receipt& r = c.receipt;
  EXPECT_EQ(r.verdict, "passed");
  EXPECT_EQ(r.workload_id, "runner-test-v1");
  EXPECT_EQ(r.profile, "cpu");
  EXPECT_EQ(r.host_id, "test-host");
  EXPECT_TRUE(r.git_worktree_clean);
  ASSERT_NE(r.find_result("hello"), nullptr);
  EXPECT_EQ(r.find_result("hello")->status, "passed");
  ASSERT_NE(r.find_result("runner:source-integrity"), nullptr);
  EXPECT_EQ(r.find_result("runner:source-integrity")->status, "passed");
  EXPECT_EQ(testing::read_text(out.run_dir + "/cases/hello/rep-1/stdout.log"), "hello\n");
  EXPECT_TRUE(fs::path(out.receipt_path).parent_path() == fs::path(repo_.path(".qualification/receipts")));
  // Every artifact is local evidence under the run directory, and the strict check holds.
  EXPECT_GE(r.artifacts.size(), 4u);
  Issues issues;
  check_receipt_requirements(r, {true, true, true, false}, repo_.root(), issues);
  EXPECT_TRUE(issues.empty()) << issues.to_string();
}

TEST_F(RunnerTest, TimedOutCaseIsKilledWithItsDescendantsAndFails) {
  std::string pidfile = repo_.path("../" + fs::path(repo_.root()).filename().string() + "-child.pid");
  Json c = make_case("slow", {"child-and-sleep", "30", pidfile}, /*timeout=*/1);
  RunOutcome out;
  ReceiptCheck rc = run_ok(commit(make_workload({c})), &out);
  EXPECT_EQ(rc.receipt.verdict, "failed");
  EXPECT_EQ(rc.receipt.find_result("slow")->status, "failed");
  EXPECT_LT(rc.receipt.find_result("slow")->duration_seconds, 10.0);
  int child = read_pid(pidfile);
  EXPECT_GT(child, 0);
  EXPECT_FALSE(alive(child)) << "descendant " << child << " survived the deadline";
  std::string outcome = testing::read_text(out.run_dir + "/cases/slow/rep-1/outcome.json");
  EXPECT_NE(outcome.find("\"timed_out\": true"), std::string::npos);
  EXPECT_NE(outcome.find("SIGINT"), std::string::npos);
  fs::remove(pidfile);
}

TEST_F(RunnerTest, DeadlineEscalatesPastAnIgnoredInterrupt) {
  RunOutcome out;
  ReceiptCheck rc = run_ok(commit(make_workload({make_case("stubborn", {"sleep", "30", "ignore-sigint"}, 1)})), &out);
  EXPECT_EQ(rc.receipt.find_result("stubborn")->status, "failed");
  std::string outcome = testing::read_text(out.run_dir + "/cases/stubborn/rep-1/outcome.json");
  EXPECT_NE(outcome.find("\"SIGINT\",\n    \"SIGTERM\""), std::string::npos) << outcome;
}

TEST_F(RunnerTest, CaseThatLeavesADaemonBehindFails) {
  std::string pidfile = repo_.root() + "-daemon.pid";
  RunOutcome out;
  ReceiptCheck rc = run_ok(commit(make_workload({make_case("daemon", {"daemon", pidfile})})), &out);
  EXPECT_EQ(rc.receipt.verdict, "failed");
  EXPECT_EQ(rc.receipt.find_result("daemon")->status, "failed");
  int daemon = read_pid(pidfile);
  EXPECT_GT(daemon, 0);
  EXPECT_FALSE(alive(daemon)) << "the daemon " << daemon << " is still running";
  std::string outcome = testing::read_text(out.run_dir + "/cases/daemon/rep-1/outcome.json");
  EXPECT_NE(outcome.find("\"pid\": " + std::to_string(daemon)), std::string::npos) << outcome;
  fs::remove(pidfile);
}

TEST_F(RunnerTest, OutputOverTheCapIsTruncatedAndFails) {
  RunRequest req = commit(make_workload({make_case("noisy", {"spam", "50000"})}));
  req.limits.capture_limit_bytes = 1000;
  RunOutcome out;
  ReceiptCheck rc = run_ok(req, &out);
  EXPECT_EQ(rc.receipt.find_result("noisy")->status, "failed");
  EXPECT_EQ(fs::file_size(out.run_dir + "/cases/noisy/rep-1/stdout.log"), 1000u);
  std::string outcome = testing::read_text(out.run_dir + "/cases/noisy/rep-1/outcome.json");
  EXPECT_NE(outcome.find("\"stdout_bytes\": 50000"), std::string::npos);
  EXPECT_NE(outcome.find("\"stdout_truncated\": true"), std::string::npos);
}

TEST_F(RunnerTest, MalformedCaseResultFails) {
  ReceiptCheck rc = run_ok(commit(make_workload({command_case("parity", {"result", "parity", "malformed"})})));
  EXPECT_EQ(rc.receipt.find_result("parity")->status, "failed");
  EXPECT_EQ(rc.receipt.verdict, "failed");
}

TEST_F(RunnerTest, CaseResultMustNameTheCaseAndOnlyDeclaredMetrics) {
  ReceiptCheck rc = run_ok(commit(make_workload({command_case("a", {"result", "a", "wrong-case"}),
                                                 command_case("b", {"result", "b", "undeclared-metric"}),
                                                 command_case("c", {"result", "c", "good"})})));
  EXPECT_EQ(rc.receipt.find_result("a")->status, "failed");
  EXPECT_EQ(rc.receipt.find_result("b")->status, "failed");
  EXPECT_EQ(rc.receipt.find_result("c")->status, "passed");
  ASSERT_NE(rc.receipt.find_result("c")->find_metric("err"), nullptr);
  EXPECT_DOUBLE_EQ(rc.receipt.find_result("c")->find_metric("err")->value.number, 0.25);
}

TEST_F(RunnerTest, CommandReportingSkippedCannotPass) {
  ReceiptCheck rc = run_ok(commit(make_workload({command_case("s", {"result", "s", "skipped"})})));
  EXPECT_EQ(rc.receipt.find_result("s")->status, "failed");
}

TEST_F(RunnerTest, ForbiddenPatternTurnsASilentSkipIntoAFailure) {
  Json c = make_case("gpu-test", {"print", "stdout", "[  SKIPPED ] no CUDA device"});
  c["output_assertions"] = Json::array({Json{{"stream", "combined"}, {"match", "forbidden"}, {"pattern", "(?i)skipp(ed|ing)"}}});
  ReceiptCheck rc = run_ok(commit(make_workload({c})));
  const ReceiptResult* r = rc.receipt.find_result("gpu-test");
  EXPECT_EQ(r->status, "failed");
  ASSERT_NE(r->find_metric("output_assertion_failures"), nullptr);
  EXPECT_EQ(r->find_metric("output_assertion_failures")->value.integer, 1);
  EXPECT_EQ(r->find_metric("exit_code")->value.integer, 0);
}

TEST_F(RunnerTest, UnexpectedExitCodeFailsAndNonRequiredFailureKeepsVerdict) {
  Json optional_case = make_case("flaky", {"exit", "3"});
  optional_case["required"] = false;
  ReceiptCheck rc = run_ok(commit(make_workload({make_case("ok", {"exit", "0"}), optional_case})));
  EXPECT_EQ(rc.receipt.find_result("flaky")->status, "failed");
  EXPECT_EQ(rc.receipt.find_result("flaky")->find_metric("exit_code")->value.integer, 3);
  EXPECT_EQ(rc.receipt.verdict, "passed");
}

TEST_F(RunnerTest, RepetitionsAggregateMetricsAndPass) {
  std::string counter = repo_.root() + "-counter";
  ReceiptCheck rc = run_ok(commit(make_workload({command_case("m", {"result", "m", "counter", counter})}, 3)));
  const ReceiptResult* r = rc.receipt.find_result("m");
  EXPECT_EQ(r->status, "passed");
  EXPECT_DOUBLE_EQ(r->find_metric("err")->value.number, 2.0);  // mean of 1, 2, 3
  EXPECT_EQ(r->find_metric("case_pass")->value.boolean, true);
  fs::remove(counter);
}

TEST_F(RunnerTest, CaseEnvironmentIsFiltered) {
  setenv("KILN_TEST_SECRET_TOKEN", "hunter2", 1);
  Json c = make_case("env", {"env"});
  c["environment"] = {{"KILN_CASE_VALUE", "declared"}};
  RunOutcome out;
  run_ok(commit(make_workload({c})), &out);
  unsetenv("KILN_TEST_SECRET_TOKEN");
  std::string env = testing::read_text(out.run_dir + "/cases/env/rep-1/stdout.log");
  EXPECT_EQ(env.find("KILN_TEST_SECRET_TOKEN"), std::string::npos);
  EXPECT_NE(env.find("KILN_CASE_VALUE=declared\n"), std::string::npos);
  EXPECT_NE(env.find("PATH="), std::string::npos);
}

TEST_F(RunnerTest, ChangingTrackedSourceDuringTheRunFails) {
  repo_.write("src/main.cc", "int main() {}\n");
  ReceiptCheck rc = run_ok(commit(make_workload({make_case("tamper", {"append", repo_.path("src/main.cc"), "// x"})})));
  EXPECT_EQ(rc.receipt.find_result("tamper")->status, "passed");
  EXPECT_EQ(rc.receipt.find_result("runner:source-integrity")->status, "failed");
  EXPECT_EQ(rc.receipt.verdict, "failed");
}

TEST_F(RunnerTest, ModelIsFingerprintedAndDriftFails) {
  std::string model = repo_.root() + "-model";
  fs::create_directories(model);
  std::ofstream(model + "/model.safetensors") << "weights";
  std::ofstream(model + "/config.json") << "{}";
  std::ofstream(model + "/tokenizer.json") << "{\"model\": {}}";
  std::ofstream(model + "/tokenizer_config.json") << "{\"chat_template\": \"{{ messages }}\"}";
  Json stable = make_case("read", {"exit", "0"});
  RunRequest req = commit(make_workload({stable}));
  req.model_dir = model;
  ReceiptCheck ok = run_ok(req);
  EXPECT_EQ(ok.receipt.verdict, "passed");
  const JsonValue& m = ok.receipt.model;
  ASSERT_TRUE(m.is_object());
  EXPECT_EQ(m.find("weight_files")->array[0].find("sha256")->string, sha256_hex("weights"));
  EXPECT_EQ(m.find("weight_files")->array[0].find("bytes")->integer, 7);
  EXPECT_FALSE(m.find("chat_template_hash")->is_null());
  EXPECT_EQ(ok.receipt.find_result("runner:model-integrity")->status, "passed");

  // A case that rewrites the weights is identity drift.
  fs::remove_all(repo_.path(".qualification"));
  testing::TempRepo other;
  other.write("qualification/workloads/runner-test-v1.json",
              make_workload({make_case("mutate", {"append", model + "/model.safetensors", "!"})}).dump(2));
  other.commit_all();
  RunRequest drift = req;
  drift.workload_path = other.path("qualification/workloads/runner-test-v1.json");
  ReceiptCheck bad = run_ok(drift);
  EXPECT_EQ(bad.receipt.find_result("runner:model-integrity")->status, "failed");
  EXPECT_EQ(bad.receipt.verdict, "failed");
  fs::remove_all(model);
}

// Refusals: nothing runs and nothing is written.

TEST_F(RunnerTest, DirtyTreeIsRefusedBeforeAnythingRuns) {
  std::string marker = repo_.root() + "-ran";
  RunRequest req = commit(make_workload({make_case("touch", {"append", marker, "ran"})}));
  repo_.write("notes.txt", "untracked\n");
  Result<RunOutcome> out = run_workload(req);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("dirty"), std::string::npos) << out.status().message();
  EXPECT_NE(out.status().message().find("notes.txt"), std::string::npos);
  EXPECT_FALSE(fs::exists(marker));
  EXPECT_TRUE(receipts_empty());
  EXPECT_TRUE(runs_empty());
}

TEST_F(RunnerTest, ModifiedTrackedFileIsRefused) {
  RunRequest req = commit(make_workload({make_case("x", {"exit", "0"})}));
  repo_.write("qualification/workloads/runner-test-v1.json", repo_.read("qualification/workloads/runner-test-v1.json") + " ");
  Result<RunOutcome> out = run_workload(req);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("dirty"), std::string::npos);
}

TEST_F(RunnerTest, WorkloadNotCommittedAtHeadIsRefused) {
  repo_.write(".gitignore", "scratch/\n");
  repo_.commit_all();
  repo_.write("scratch/w.json", make_workload({make_case("x", {"exit", "0"})}).dump(2));
  RunRequest req;
  req.workload_path = repo_.path("scratch/w.json");
  req.variant_id = "cpu";
  req.host_id = "h";
  Result<RunOutcome> out = run_workload(req);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("not committed at HEAD"), std::string::npos) << out.status().message();
  EXPECT_TRUE(runs_empty());
}

TEST_F(RunnerTest, InvalidWorkloadIsRefused) {
  Json w = make_workload({make_case("x", {"exit", "0"})});
  w["variants"][0]["cases"][0]["command"] = Json::array({"sh", "-c", "true"});
  Result<RunOutcome> out = run_workload(commit(w));
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("[no-shell]"), std::string::npos) << out.status().message();
}

TEST_F(RunnerTest, UnknownVariantAndVariablesAreRefused) {
  testing::TempRepo& repo = repo_;
  Json w = testing::load_fixture("ab");
  repo.write("qualification/workloads/runner-test-v1.json", w.dump(2));
  repo.commit_all();
  RunRequest req;
  req.workload_path = repo.path("qualification/workloads/runner-test-v1.json");
  req.host_id = "h";
  req.variant_id = "batch64";
  Result<RunOutcome> unknown_variant = run_workload(req);
  ASSERT_FALSE(unknown_variant.ok());
  EXPECT_NE(unknown_variant.status().message().find("--variant batch64"), std::string::npos);

  req.variant_id = "batch1";
  Result<RunOutcome> missing = run_workload(req);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.status().message().find("required variable precision is missing"), std::string::npos)
      << missing.status().message();

  req.variables = {{"precision", "bf16"}, {"threads", "4"}};
  Result<RunOutcome> unknown_var = run_workload(req);
  ASSERT_FALSE(unknown_var.ok());
  EXPECT_NE(unknown_var.status().message().find("--var threads"), std::string::npos);

  req.variables = {{"precision", "fp8"}};
  Result<RunOutcome> not_allowed = run_workload(req);
  ASSERT_FALSE(not_allowed.ok());
  EXPECT_NE(not_allowed.status().message().find("allowed values are bf16, f32"), std::string::npos)
      << not_allowed.status().message();
  EXPECT_TRUE(runs_empty());
}

TEST_F(RunnerTest, OutputOutsideTheReceiptDirectoriesIsRefused) {
  RunRequest req = commit(make_workload({make_case("x", {"exit", "0"})}));
  for (std::string bad : {repo_.path("receipt.json"), repo_.path("qualification/receipts/../r.json"),
                          std::string("/tmp/r.json"), repo_.path(".qualification/receipts/r.txt")}) {
    req.output_path = bad;
    Result<RunOutcome> out = run_workload(req);
    EXPECT_FALSE(out.ok()) << bad;
  }
  EXPECT_TRUE(runs_empty());
}

TEST_F(RunnerTest, ExistingReceiptIsNeverOverwritten) {
  RunRequest req = commit(make_workload({make_case("x", {"exit", "0"})}));
  req.output_path = repo_.path(".qualification/receipts/mine.json");
  repo_.write(".qualification/receipts/mine.json", "sentinel");
  Result<RunOutcome> out = run_workload(req);
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("already exists"), std::string::npos);
  EXPECT_EQ(repo_.read(".qualification/receipts/mine.json"), "sentinel");
  EXPECT_TRUE(runs_empty());

  // A fresh path works once, then the same path is refused and the first receipt is kept.
  req.output_path = repo_.path("qualification/receipts/kept.json");
  run_ok(req);
  std::string first = repo_.read("qualification/receipts/kept.json");
  // The committed-receipt directory is tracked, so the new file makes the tree dirty: commit it.
  repo_.commit_all("receipt");
  Result<RunOutcome> again = run_workload(req);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("already exists"), std::string::npos);
  EXPECT_EQ(repo_.read("qualification/receipts/kept.json"), first);
}

TEST_F(RunnerTest, MissingDeviceFailsWithoutRunningCases) {
  // This build has no rocm probe, so a rocm device is never observed: the variant requires one,
  // so the run fails (skip_policy "fail") and records why, instead of inventing a device.
  Json w = make_workload({make_case("x", {"exit", "0"})});
  w["variants"][0]["backend"] = "rocm";
  w["variants"][0]["device_requirement"] = "required";
  ReceiptCheck rc = run_ok(commit(w));
  EXPECT_EQ(rc.receipt.verdict, "failed");
  EXPECT_EQ(rc.receipt.find_result("x"), nullptr);
  EXPECT_EQ(rc.receipt.find_result("runner:device")->status, "failed");
  EXPECT_TRUE(rc.receipt.device.find("name")->is_null());
  EXPECT_GT(rc.receipt.unsupported_count, 0u);
}

}  // namespace
}  // namespace kiln::qualify
