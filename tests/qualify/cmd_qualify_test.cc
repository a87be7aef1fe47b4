// The `kiln qualify` command line, run as a real process: exit codes (0 success, 1 failed or
// invalid, 2 refused) and messages that name the JSON path and rule.
#include <gtest/gtest.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "qualify/environment_filter.h"
#include "qualify/process.h"
#include "qualify/receipt_fixtures.h"
#include "qualify/temp_repo.h"

namespace kiln::qualify {
namespace {

struct Cli {
  int exit_code = -1;
  std::string out;
  std::string err;
};

Cli kiln(std::vector<std::string> args, const std::string& cwd = "/tmp") {
  ProcessSpec spec;
  spec.argv = {KILN_BINARY_PATH};
  spec.argv.insert(spec.argv.end(), args.begin(), args.end());
  spec.working_directory = cwd;
  spec.environment = filtered_environment();
  spec.timeout_seconds = 120;
  Result<ProcessOutcome> o = run_process(spec);
  EXPECT_TRUE(o.ok() && o->started) << (o.ok() ? o->start_error : o.status().to_string());
  if (!o.ok()) return {};
  return {o->exit_code, o->stdout_text, o->stderr_text};
}

std::string write_temp(const std::string& name, const std::string& text) {
  std::string path = "/tmp/kiln-qualify-cli-" + std::to_string(getpid()) + "-" + name;
  std::ofstream(path) << text;
  return path;
}

TEST(QualifyCli, ValidateAcceptsTheFixtures) {
  Cli c = kiln({"qualify", "validate", testing::fixture_path("correctness"), testing::fixture_path("environment")});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("valid: fixture-correctness-v1 (correctness, 2 variant(s)) sha256:"), std::string::npos) << c.out;
}

TEST(QualifyCli, ValidateNamesEveryProblemWithPathAndRule) {
  nlohmann::ordered_json w = testing::load_fixture("correctness");
  w["variants"][0]["cases"][0]["command"] = {"bash", "-c", "ctest"};
  w["variants"][0]["cases"][0]["timeout_seconds"] = 0;
  std::string path = write_temp("bad.json", w.dump(2));
  Cli c = kiln({"qualify", "validate", path});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("$.variants[0].cases[0].command[0]: [no-shell]"), std::string::npos) << c.err;
  EXPECT_NE(c.err.find("$.variants[0].cases[0].timeout_seconds: [timeout-range]"), std::string::npos) << c.err;
  std::filesystem::remove(path);
}

TEST(QualifyCli, RunExitsZeroOnlyForAPassedVerdictAndTwoForARefusal) {
  testing::TempRepo repo;
  nlohmann::ordered_json w = testing::load_fixture("environment");
  // Receipts find their workload by id: qualification/workloads/<workload_id>.json.
  repo.write("qualification/workloads/fixture-environment-v1.json", w.dump(2));
  w["workload_id"] = "fixture-environment-fail-v1";
  w["variants"][0]["cases"][0]["expected_exit_codes"] = {7};
  repo.write("qualification/workloads/fixture-environment-fail-v1.json", w.dump(2));
  repo.commit_all();
  Cli ok = kiln({"qualify", "run", "qualification/workloads/fixture-environment-v1.json", "--variant", "cpu", "--host-id", "cli-test"}, repo.root());
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("verdict: passed"), std::string::npos);
  Cli failed = kiln({"qualify", "run", "qualification/workloads/fixture-environment-fail-v1.json", "--variant", "cpu", "--host-id", "cli-test"}, repo.root());
  EXPECT_EQ(failed.exit_code, 1);
  EXPECT_NE(failed.out.find("verdict: failed"), std::string::npos);
  Cli refused = kiln({"qualify", "run", "qualification/workloads/fixture-environment-v1.json", "--variant", "gpu", "--host-id", "cli-test"}, repo.root());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("refused"), std::string::npos);

  // The receipt of the passed run validates, including --require-known-commit.
  std::string receipt = ok.out.substr(ok.out.find("receipt: ") + 9);
  receipt = receipt.substr(0, receipt.find('\n'));
  Cli check = kiln({"qualify", "receipt", receipt, "--require-known-commit", "--require-current-source",
                    "--require-local-artifacts"}, repo.root());
  EXPECT_EQ(check.exit_code, 0) << check.err;
  EXPECT_NE(check.out.find("verdict=passed"), std::string::npos);
}

// `qualify receipts --require-current-cpu` holds with a current passed cpu receipt of every cpu
// variant, and names the breach once the source moves on.
TEST(QualifyCli, ReceiptsRequireCurrentCpuFailsOnceTheSourceMovesOn) {
  testing::TempRepo repo;
  repo.write("src/a.txt", "source\n");
  repo.write(".gitignore", ".qualification/\n");
  repo.write("qualification/workloads/fixture-environment-v1.json", testing::load_fixture("environment").dump(2));
  repo.commit_all();
  Cli ok = kiln({"qualify", "run", "qualification/workloads/fixture-environment-v1.json", "--variant", "cpu",
                 "--host-id", "cli-test", "--output", "qualification/receipts/env-cpu.json"},
                repo.root());
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  repo.commit_all("the receipt");
  Cli current = kiln({"qualify", "receipts", "--require-current-cpu"}, repo.root());
  EXPECT_EQ(current.exit_code, 0) << current.out << current.err;
  EXPECT_NE(current.out.find("fixture-environment-v1/cpu"), std::string::npos) << current.out;
  repo.write("src/a.txt", "changed\n");
  repo.commit_all("new source");
  Cli stale = kiln({"qualify", "receipts", "--require-current-cpu"}, repo.root());
  EXPECT_EQ(stale.exit_code, 1);
  EXPECT_NE(stale.err.find("breach: qualification/receipts/env-cpu.json: stale: "), std::string::npos) << stale.err;
  EXPECT_NE(stale.err.find("src/a.txt"), std::string::npos) << stale.err;
}

TEST(QualifyCli, ReceiptRejectsAnInconsistentVerdict) {
  nlohmann::ordered_json r = testing::cpu_receipt();
  r["results"][0]["status"] = "failed";
  std::string path = write_temp("receipt.json", r.dump());
  Cli c = kiln({"qualify", "receipt", path});
  EXPECT_EQ(c.exit_code, 1);
  EXPECT_NE(c.err.find("$.qualification.verdict: [passed-results]"), std::string::npos) << c.err;
  std::filesystem::remove(path);
}

TEST(QualifyCli, CompareExitCodeAndJson) {
  std::string base = write_temp("cpu.json", testing::cpu_receipt().dump());
  nlohmann::ordered_json cuda = testing::cuda_receipt();
  std::string cand = write_temp("cuda.json", cuda.dump());
  Cli holds = kiln({"qualify", "compare", base, cand, "--workload-manifest", testing::fixture_path("correctness"), "--json"});
  EXPECT_EQ(holds.exit_code, 0) << holds.out << holds.err;
  EXPECT_NE(holds.out.find("\"holds\": true"), std::string::npos);
  cuda["results"][0]["metrics"][2]["value"] = 0.5;
  std::ofstream(cand, std::ios::trunc) << cuda.dump();
  Cli fails = kiln({"qualify", "compare", base, cand, "--workload-manifest", testing::fixture_path("correctness")});
  EXPECT_EQ(fails.exit_code, 1);
  EXPECT_NE(fails.out.find("failed  parity/max_abs_error equal"), std::string::npos) << fails.out;
  std::filesystem::remove(base);
  std::filesystem::remove(cand);
}

}  // namespace
}  // namespace kiln::qualify
