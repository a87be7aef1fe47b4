// `kiln bench eval` on the tiny-chat model: the committed arithmetic suite runs to completion with
// one outcome per example, in the suite's order and with its expected answers, and the case
// result meets the eval-v1 cpu case.
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_metrics.h"
#include "chat_model.h"
#include "run_command.h"
#include "test_util.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  return json::parse(in);
}

TEST(BenchEvalCli, TheSuiteRunsToCompletionAndTheCaseResultMeetsTheWorkload) {
  const std::string src = KILN_SOURCE_DIR;
  const json suite = read_json(src + "/bench/evals/arithmetic-v1.json");
  const json w = read_json(src + "/qualification/workloads/eval-v1.json");
  const json& variant = w["variants"][0];
  ASSERT_EQ(variant["id"], "cpu");
  const json& kase = variant["cases"][0];
  const std::string dir = testing::temp_dir("bench-eval");
  const testing::CommandResult c = testing::run_command(
      "env KILN_QUALIFICATION_CASE_RESULT=" + dir + "/case.json " + std::string(KILN_BINARY_PATH) +
      " bench eval --backend cpu --model " + testing::chat_model() + " --suite-file " + src +
      "/bench/evals/arithmetic-v1.json --max-tokens 4 2>" + dir + "/stderr");
  std::ifstream err_in(dir + "/stderr");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(c.code, 0) << err;
  const json doc = json::parse(c.out);
  const json& job = doc["job"];
  EXPECT_EQ(job["state"], "completed");
  EXPECT_EQ(job["max_tokens"], 4);
  ASSERT_EQ(job["total"], suite["examples"].size());
  ASSERT_EQ(job["outcomes"].size(), suite["examples"].size());
  int64_t passed = 0;
  for (size_t i = 0; i < suite["examples"].size(); ++i) {
    EXPECT_EQ(job["outcomes"][i]["expected"], suite["examples"][i]["expected"]) << i;
    EXPECT_EQ(job["outcomes"][i]["scorer"], "numeric_tolerance") << i;
    passed += job["outcomes"][i]["passed"].get<bool>();
  }
  EXPECT_EQ(job["passed"], passed);

  const json r = read_json(dir + "/case.json");
  EXPECT_EQ(r["case_id"], kase["id"]);
  EXPECT_EQ(r["status"], "passed");
  json want = variant["effective_config"];
  want["max_tokens"] = 4;
  EXPECT_EQ(r["effective_config"], want);
  EXPECT_EQ(testing::reported_metrics(r), testing::declared_metrics(kase));
  EXPECT_EQ(r["metrics"][3]["value"], passed);
}

TEST(BenchEvalCli, ASuiteFileThatIsNotASuiteIsRefusedNamingIt) {
  const std::string dir = testing::temp_dir("bench-eval-bad");
  std::ofstream(dir + "/s.json") << "[1, 2]";
  const testing::CommandResult c =
      testing::run_command(std::string(KILN_BINARY_PATH) + " bench eval --suite-file " + dir + "/s.json 2>&1");
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.out.find("--suite-file: " + dir + "/s.json is not a suite"), std::string::npos) << c.out;
}

}  // namespace
}  // namespace kiln
