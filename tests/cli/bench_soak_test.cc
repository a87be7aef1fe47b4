// `kiln bench soak` on the tiny-chat model for a few seconds: no request fails, the clients that
// were asked to disconnect did, the adapter reload made revision 2, the engine ends idle and
// whole, every memory sample is read, and the case result meets the soak-v1 cpu case.
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

TEST(BenchSoakCli, ClientsDisconnectAdapterSwapsAndTheEngineEndsWhole) {
  std::ifstream wf(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/soak-v1.json");
  const json w = json::parse(wf);
  const json& variant = w["variants"][0];
  ASSERT_EQ(variant["id"], "cpu");
  const json& kase = variant["cases"][0];
  const std::string dir = testing::temp_dir("bench-soak");
  const std::string result = dir + "/case.json";
  const testing::CommandResult c = testing::run_command(
      "env KILN_QUALIFICATION_CASE_RESULT=" + result + " " + std::string(KILN_BINARY_PATH) +
      " bench soak --model " + testing::chat_model() + " --backend cpu --concurrency 4 --duration 4 --sample-every 1 " +
      "--disconnect-every 3 --max-tokens 6 --prompt-set " + KILN_SOURCE_DIR + "/bench/prompts/serving-v1.jsonl 2>" +
      dir + "/stderr");
  std::ifstream err_in(dir + "/stderr");
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(c.code, 0) << err;
  const json doc = json::parse(c.out);
  const json& load = doc["load"];
  EXPECT_EQ(load["errors"], 0);
  const int64_t requests = load["requests"].get<int64_t>();
  ASSERT_GE(requests, 6) << "four clients for four seconds";
  // Requests 2, 5, 8, ... close their streams after the first token (one without any token
  // finishes instead).
  EXPECT_GE(load["disconnected"].get<int64_t>(), 1);
  EXPECT_LE(load["disconnected"].get<int64_t>(), (requests + 1) / 3);
  EXPECT_EQ(doc["swap"]["http_status"], 200);
  EXPECT_EQ(doc["swap"]["revision"], 2);
  EXPECT_EQ(doc["engine_problems"], json::array());
  const json& e = doc["engine_after"];
  EXPECT_EQ(e["running"], 0);
  EXPECT_EQ(e["kv_blocks_free"].get<int64_t>() + e["kv_blocks_cached"].get<int64_t>(), e["kv_blocks_total"].get<int64_t>());
  EXPECT_EQ(e["gdn_slots_free"].get<int64_t>() + e["gdn_slots_cached"].get<int64_t>(), e["gdn_slots_total"].get<int64_t>());
  // Every sample reads resident memory and the heap; those taken during the run read the engine's
  // decode recordings too, none on the CPU backend, which runs every step eagerly.
  const json& samples = doc["samples"];
  ASSERT_GE(samples.size(), 2u);
  for (size_t i = 0; i < samples.size(); ++i) {
    EXPECT_GT(samples[i]["rss_mib"].get<double>(), 0) << i;
    EXPECT_GE(samples[i]["heap_mib"].get<double>(), 0) << i;
    if (i + 1 < samples.size()) EXPECT_EQ(samples[i]["recordings"].get<double>(), 0) << i;
  }
  ASSERT_EQ(doc["per_minute"].size(), 1u);
  EXPECT_EQ(doc["per_minute"][0]["requests"], requests);
  EXPECT_TRUE(doc["holds"].get<bool>());

  std::ifstream in(result);
  const json r = json::parse(in);
  EXPECT_EQ(r["case_id"], kase["id"]);
  EXPECT_EQ(r["status"], "passed");
  json want = variant["effective_config"];
  want["concurrency"] = 4, want["duration_s"] = 4.0, want["disconnect_every"] = 3, want["max_tokens"] = 6;
  EXPECT_EQ(r["effective_config"], want);
  EXPECT_EQ(testing::reported_metrics(r), testing::declared_metrics(kase));
}

TEST(BenchSoakCli, BadArgumentsAreRefusedNamingThem) {
  const std::string bin = std::string(KILN_BINARY_PATH) + " bench soak ";
  for (const auto& [args, want] : std::vector<std::pair<std::string, std::string>>{
           {"--swap-at 1", "--swap-at must be a fraction"},
           {"--duration 0", "--duration must be in (0, 86400]"},
           {"--concurrency 0", "--concurrency must be in 1..4096"},
           {"--max-tokens 1", "--max-tokens must be at least 2"}}) {
    const testing::CommandResult c = testing::run_command(bin + args + " 2>&1");
    EXPECT_EQ(c.code, 1) << args;
    EXPECT_NE(c.out.find(want), std::string::npos) << args << ": " << c.out;
  }
}

}  // namespace
}  // namespace kiln
