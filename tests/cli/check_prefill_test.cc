// `kiln check prefill-continuity`: the three routes' passes start where the arguments say, the
// routes agree on the fixture model, the case result meets the workload's cpu case, a tolerance
// below the measured difference fails, and bad arguments are refused naming them.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_metrics.h"
#include "run_command.h"
#include "test_util.h"

namespace kiln {
namespace {

using json = nlohmann::json;

struct CheckRun {
  int code = -1;
  json doc;
  std::string err;
};

// The untied GQA reference fixture (2 GDN layers and attention), a prompt of 200 tokens.
CheckRun check(const std::string& args, const std::string& env = "env -u KILN_QUALIFICATION_CASE_RESULT") {
  const std::string err_path = testing::temp_dir("check-prefill-err") + "/stderr";
  const testing::CommandResult c = testing::run_command(
      env + " " + std::string(KILN_BINARY_PATH) + " check prefill-continuity --model " + KILN_FIXTURES_DIR +
      "/reference/gqa_untied --prompt-tokens 200 --decode-tokens 4 " + args + " 2>" + err_path);
  CheckRun r;
  r.code = c.code;
  r.doc = json::parse(c.out, nullptr, false);
  std::ifstream in(err_path);
  r.err.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return r;
}

TEST(CheckPrefillContinuity, RoutesPassWhereTheArgumentsSayAndAgree) {
  const CheckRun r = check("--chunks 37,64 --tile 64");
  ASSERT_EQ(r.code, 0) << r.err;
  const json& routes = r.doc["routes"];
  EXPECT_EQ(routes["single"]["pass_starts"], json::array({0}));
  EXPECT_EQ(routes["chunked"]["pass_starts"], json::array({0, 37, 101, 138}));  // 37, 64, 37, 62
  EXPECT_EQ(routes["tiled"]["pass_starts"], json::array({0, 64, 128, 192}));
  for (const char* name : {"chunked", "tiled"}) {
    EXPECT_EQ(routes[name]["greedy_tokens"], routes["single"]["greedy_tokens"]) << name;
    EXPECT_LE(routes[name]["logits_relative_diff"].get<double>(), 1e-4) << name;
    EXPECT_LE(routes[name]["state_relative_diff"].get<double>(), 1e-4) << name;
  }
  EXPECT_EQ(routes["single"]["greedy_tokens"].size(), 4u);
  EXPECT_TRUE(r.doc["holds"].get<bool>());
}

// The case result of the prefill-continuity-v2 cpu case's own flags (this fixture and a shorter
// prompt for the workload's) has the variant's effective_config but for the prompt, and exactly
// its declared metrics.
TEST(CheckPrefillContinuity, CaseResultMeetsTheWorkloadsCpuCase) {
  std::ifstream wf(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/prefill-continuity-v2.json");
  const json w = json::parse(wf);
  const json& variant = w["variants"][0];
  ASSERT_EQ(variant["id"], "cpu");
  const json& kase = variant["cases"][0];
  const json& cfg = variant["effective_config"];
  const std::string result = testing::temp_dir("check-prefill-wl") + "/case.json";
  const CheckRun r = check("--chunks " + cfg["chunks"].get<std::string>() + " --tile " + std::to_string(cfg["tile"].get<int>()) +
                               " --tolerance 1e-4",
                           "KILN_QUALIFICATION_CASE_RESULT=" + result);
  ASSERT_EQ(r.code, 0) << r.err;
  std::ifstream in(result);
  const json c = json::parse(in);
  EXPECT_EQ(c["case_id"], kase["id"]);
  EXPECT_EQ(c["status"], "passed");
  json want = cfg;
  want["prompt_tokens"] = 200;
  want["decode_tokens"] = 4;
  EXPECT_EQ(c["effective_config"], want);
  EXPECT_EQ(testing::reported_metrics(c), testing::declared_metrics(kase));
  EXPECT_EQ(c["details"]["routes"], r.doc["routes"]);
}

// Chunk boundaries change the order of the GDN sums, so the routes differ by a little; a tolerance
// below that difference fails the check and its case result.
TEST(CheckPrefillContinuity, AToleranceBelowTheDifferenceFails) {
  const CheckRun loose = check("--chunks 37,64 --tile 64");
  ASSERT_EQ(loose.code, 0) << loose.err;
  const double d = loose.doc["routes"]["chunked"]["state_relative_diff"].get<double>();
  ASSERT_GT(d, 0.0);
  char tol[32];
  std::snprintf(tol, sizeof tol, "%.3g", d / 4);
  const std::string result = testing::temp_dir("check-prefill-fail") + "/case.json";
  const CheckRun tight = check("--chunks 37,64 --tile 64 --tolerance " + std::string(tol),
                               "KILN_QUALIFICATION_CASE_RESULT=" + result);
  EXPECT_EQ(tight.code, 1);
  EXPECT_FALSE(tight.doc["holds"].get<bool>());
  EXPECT_NE(tight.err.find("prefill routes disagree beyond --tolerance"), std::string::npos) << tight.err;
  std::ifstream in(result);
  EXPECT_EQ(json::parse(in)["status"], "failed");
}

TEST(CheckPrefillContinuity, BadArgumentsAreRefusedNamingThem) {
  EXPECT_NE(check("--tile 100").err.find("--tile must be a positive multiple of 64"), std::string::npos);
  EXPECT_NE(check("--tile 256").err.find("must be shorter than --prompt-tokens"), std::string::npos);
  EXPECT_NE(check("--chunks 5,0").err.find("--chunks: '0' is not a chunk length"), std::string::npos);
  EXPECT_NE(check("--tolerance 2").err.find("--tolerance must be in (0, 1)"), std::string::npos);
  EXPECT_EQ(check("--tile 100").code, 1);
}

}  // namespace
}  // namespace kiln
