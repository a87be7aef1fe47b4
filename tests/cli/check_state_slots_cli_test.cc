// `kiln check state-slots` as the state-slots-v1 workload runs it, on the CPU and a tiny random
// checkpoint: the case result carries the cpu variant's effective config and exactly its declared
// metrics, the accounting closes over the declared sequence; an injected leak or token mismatch,
// each, makes the check fail (exit 1, status failed), the mismatch saying where; a pool with no
// snapshot slots counts the snapshots it could not take and still passes; bad knobs are refused
// naming the flag.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/init.h"
#include "run_command.h"
#include "test_util.h"

namespace kiln {
namespace {

using json = nlohmann::json;

struct CheckRun {
  int code = -1;
  std::string out, err;
};

CheckRun check(const std::string& args, const std::string& env = "env -u KILN_QUALIFICATION_CASE_RESULT") {
  const std::string err_path = testing::temp_dir("check-slots-err") + "/stderr";
  const testing::CommandResult c =
      testing::run_command(env + " " + std::string(KILN_BINARY_PATH) + " check state-slots " + args + " 2>" + err_path);
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  return {c.code, c.out, ss.str()};
}

// The tiny-chat preset (a hybrid GDN + attention model), written once.
const std::string& tiny_model() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("check-slots-model");
    InitOptions o;
    o.quiet = true;
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, o).ok());
    return d;
  }();
  return dir;
}

const json& cpu_variant() {
  static const json v = [] {
    std::ifstream wf(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/state-slots-v1.json");
    return json::parse(wf)["variants"][0];
  }();
  return v;
}

TEST(CheckStateSlotsCli, CaseResultMeetsTheWorkloadsCpuCase) {
  const json& variant = cpu_variant();
  ASSERT_EQ(variant["id"], "cpu");
  std::string args;
  const json& cmd = variant["cases"][0]["command"];
  for (size_t i = 3; i < cmd.size(); ++i) {  // after "./build/kiln check state-slots"
    std::string a = cmd[i].get<std::string>();
    if (a == "${model_path}") a = tiny_model();
    else if (a == "${seed}") a = "0";
    args += " " + a;
  }
  const std::string result = testing::temp_dir("check-slots-case") + "/case.json";
  const CheckRun r = check(args, "KILN_QUALIFICATION_CASE_RESULT=" + result);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.out << r.err;
  std::ifstream in(result);
  ASSERT_TRUE(in.good()) << "no case result at " << result;
  const json c = json::parse(in);
  EXPECT_EQ(c["case_id"], "state-slots");
  EXPECT_EQ(c["status"], "passed");
  EXPECT_EQ(c["effective_config"], variant["effective_config"]);
  std::vector<std::pair<std::string, std::string>> declared, written;
  for (const auto& m : variant["cases"][0]["result_protocol"]["declared_metrics"])
    if (m["name"] != "case_pass") declared.emplace_back(m["name"], m["unit"]);  // the runner's
  std::map<std::string, int64_t> value;
  for (const auto& m : c["metrics"]) {
    written.emplace_back(m["name"], m["unit"]);
    value[m["name"].get<std::string>()] = m["value"].get<int64_t>();
  }
  EXPECT_EQ(written, declared);

  // The declared sequence: 10 requests, each admitted once (no admission is undone: the K/V cache
  // holds every running request), requests 3 and 7 cancelled, the even ones sharing a block.
  EXPECT_EQ(value["acquisitions"] + value["restores"], 10);
  EXPECT_EQ(value["sequence_releases"], 10);
  EXPECT_GE(value["restores"], 1);
  EXPECT_EQ(value["leaked_slots"], 0);
  EXPECT_EQ(value["continuity_mismatches"], 0);
  EXPECT_EQ(value["peak_active_slots"], 3);  // max_running
  const json j = json::parse(r.out);
  EXPECT_EQ(j["continuity"]["completed"], 8);
  EXPECT_EQ(j["continuity"]["cancelled"], 2);
  EXPECT_EQ(j["slots"]["total"], 5);  // max_running + snapshot slots
  EXPECT_EQ(j["slots"]["active"], 0);
  EXPECT_EQ(j["slots"]["idle"].get<int64_t>() + j["slots"]["cached"].get<int64_t>(), 5);
  EXPECT_EQ(value["snapshots"], value["cache_releases"] + j["slots"]["cached"].get<int64_t>());
  EXPECT_NE(j["refusal"].get<std::string>().find("K/V blocks"), std::string::npos) << j["refusal"];
}

const char* kSmall = " --requests 5 --max-running 2 --max-tokens 4";

TEST(CheckStateSlotsCli, AnInjectedLeakFailsTheCheck) {
  const std::string result = testing::temp_dir("check-slots-leak") + "/case.json";
  const CheckRun r = check("--model " + tiny_model() + kSmall + " --inject-fault leak", "KILN_QUALIFICATION_CASE_RESULT=" + result);
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_NE(r.err.find("state-slots check failed"), std::string::npos) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["accounting"]["leaked_slots"], 1);
  EXPECT_EQ(j["accounting"]["sequence_slots_closed"], false);
  EXPECT_EQ(j["continuity"]["mismatches"], 0);  // the declared requests themselves are fine
  std::ifstream in(result);
  ASSERT_TRUE(in.good());
  EXPECT_EQ(json::parse(in)["status"], "failed");
}

TEST(CheckStateSlotsCli, AnInjectedTokenMismatchFailsTheCheck) {
  const CheckRun r = check("--model " + tiny_model() + kSmall + " --inject-fault mismatch");
  EXPECT_EQ(r.code, 1) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["passed"], false);
  EXPECT_EQ(j["continuity"]["mismatches"], 1);
  EXPECT_EQ(j["continuity"]["requests"][0]["equal_to_alone"], false);
  // It says where the tokens part: the first, which the fault replaced in the reference by the run
  // alone's second likeliest, so that the gap there is the second's logprob minus the first's, and
  // running the request alone again does not repeat the reference. The requests that agree say
  // nothing of the kind.
  const json& first = j["continuity"]["requests"][0];
  EXPECT_EQ(first["diverges_at"], 0);
  EXPECT_NE(first["token"], first["alone_token"]);
  ASSERT_TRUE(first["alone_logprob_gap"].is_number()) << first.dump();
  EXPECT_LE(first["alone_logprob_gap"].get<double>(), 0.0);
  EXPECT_EQ(first["alone_repeats"], false);
  EXPECT_FALSE(j["continuity"]["requests"][1].contains("diverges_at"));
  EXPECT_EQ(j["accounting"]["leaked_slots"], 0);
  EXPECT_EQ(j["accounting"]["sequence_slots_closed"], true);
}

// Without snapshot slots, a boundary reached while every slot is running finds none: counted as
// a failure, the prefix stays cached without a snapshot, and the requests are unharmed.
TEST(CheckStateSlotsCli, SnapshotsWithoutAFreeSlotAreCountedFailures) {
  const CheckRun r = check("--model " + tiny_model() + kSmall + " --snapshot-slots 0");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["passed"], true);
  EXPECT_GE(j["counters"]["failures"].get<int64_t>(), 1);
  EXPECT_EQ(j["slots"]["total"], 2);
  EXPECT_EQ(j["continuity"]["mismatches"], 0);
}

TEST(CheckStateSlotsCli, BadKnobsAreRefusedNamingThem) {
  CheckRun r = check("--model " + tiny_model() + " --requests 3 --max-running 3");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--requests"), std::string::npos) << r.err;
  r = check("--model " + tiny_model() + " --prompt-tokens 64");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--prompt-tokens"), std::string::npos) << r.err;
  r = check("--model " + tiny_model() + " --inject-fault flood");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--inject-fault flood"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;  // refused before any work
}

}  // namespace
}  // namespace kiln
