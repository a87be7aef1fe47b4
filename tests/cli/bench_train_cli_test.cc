// `kiln bench train` as a user (and the training-sft-cuda-v2 workload) runs it, on the CPU: one
// JSON document with a loss per step and the step time; on a dataset, the conversations cycled
// into exactly --steps steps and the qualification case result whose losses are the document's;
// --method grpo and opd: every phase of an online iteration timed, the sampled tokens exactly
// prompts x group x max tokens, the parts alone; refusals that name the bad flag.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "case_metrics.h"
#include "chat_model.h"
#include "model/init.h"
#include "test_util.h"
#include "run_command.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct TrainRun {
  int code = -1;
  std::string out, err;
};

// `kiln bench train ARGS` with stdout and stderr kept apart; `env` prefixes the command.
TrainRun bench_train(const std::string& args, const std::string& env = "env -u KILN_QUALIFICATION_CASE_RESULT") {
  const std::string err_path = testing::temp_dir("bench-train-err") + "/stderr";
  const testing::CommandResult c =
      testing::run_command(env + " " + std::string(KILN_BINARY_PATH) + " bench train " + args + " 2>" + err_path);
  TrainRun r;
  r.code = c.code;
  r.out = c.out;
  std::ifstream in(err_path);
  std::stringstream ss;
  ss << in.rdbuf();
  r.err = ss.str();
  return r;
}

using testing::chat_model;

TEST(BenchTrainCli, RandomTokensGiveALossPerStepAndTheStepsTokens) {
  const TrainRun r = bench_train("--model " + chat_model() + " --sequences 2 --seq-tokens 24 --steps 3 --lora-rank 4");
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["losses"].size(), 3u);
  EXPECT_EQ(j["step_seconds"].size(), 3u);
  EXPECT_EQ(j["tokens_per_step"], 48);
  EXPECT_EQ(j["lora_rank"], 4);
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_NEAR(j["tokens_per_s"].get<double>(), 48.0 / j["median_step_seconds"].get<double>(), 1e-6);
  EXPECT_NE(r.err.find("step 3/3"), std::string::npos) << r.err;  // progress on stderr
}

TEST(BenchTrainCli, DatasetRunWritesTheCaseResultOfItsLosses) {
  const std::string dir = testing::temp_dir("bench-train-case");
  const std::string data = dir + "/data.jsonl";
  {
    std::ofstream f(data);
    for (const char* a : {"red", "green", "blue"})
      f << json{{"messages", {{{"role", "user"}, {"content", "A colour?"}}, {{"role", "assistant"}, {"content", a}}}}}.dump()
        << "\n";
  }
  const std::string result = dir + "/case.json";
  const TrainRun r = bench_train("--model " + chat_model() + " --dataset " + data + " --sequences 2 --steps 4 --seed 3 --optimizer adam_w",
                            "KILN_QUALIFICATION_CASE_RESULT=" + result);
  ASSERT_EQ(r.code, 0) << r.err;
  const json j = json::parse(r.out);
  ASSERT_EQ(j["losses"].size(), 4u);  // 3 conversations cycled into 4 steps of 2
  EXPECT_EQ(j["seed"], 3);
  std::ifstream in(result);
  ASSERT_TRUE(in.good()) << "no case result at " << result;
  const json c = json::parse(in);
  EXPECT_EQ(c["case_id"], "sft");
  EXPECT_EQ(c["status"], "passed");
  std::map<std::string, double> m;
  for (const auto& x : c["metrics"]) m[x["name"].get<std::string>()] = x["value"].get<double>();
  EXPECT_EQ(m["first_loss"], j["losses"][0].get<double>());
  EXPECT_EQ(m["final_loss"], j["losses"][3].get<double>());
  EXPECT_NEAR(m["step_time_ms"], 1e3 * j["median_step_seconds"].get<double>(), 1e-9);
  EXPECT_EQ(m["tokens_per_second"], j["tokens_per_s"].get<double>());
}

// The runner refuses a case result whose effective_config differs from the variant's: run the
// training-sft-cuda-v2 case's own arguments (one step) and compare with the committed workload.
TEST(BenchTrainCli, CaseResultCarriesTheWorkloadsEffectiveConfig) {
  std::ifstream wf(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/training-sft-cuda-v2.json");
  const json w = json::parse(wf);
  const json& variant = w["variants"][0];
  std::string args;
  const json& cmd = variant["cases"][0]["command"];
  for (size_t i = 3; i < cmd.size(); ++i) {  // after "./build/kiln bench train"
    std::string a = cmd[i].get<std::string>();
    if (a == "${model_path}") a = chat_model();
    else if (a == "${steps}") a = "1";
    else if (a == "${seed}") a = "0";
    else if (a == "cuda") a = "cpu";
    else if (a.rfind("bench/", 0) == 0) a = std::string(KILN_SOURCE_DIR) + "/" + a;
    args += " " + a;
  }
  const std::string result = testing::temp_dir("bench-train-wl") + "/case.json";
  const TrainRun r = bench_train(args, "KILN_QUALIFICATION_CASE_RESULT=" + result);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
  std::ifstream in(result);
  const json c = json::parse(in);
  json want = variant["effective_config"];
  want["backend"] = "cpu";  // the one argument changed to run here
  EXPECT_EQ(c["effective_config"], want);
}

TEST(BenchTrainCli, BadInputIsRefusedNamingIt) {
  TrainRun r = bench_train("--model " + chat_model() + " --steps 0");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--steps"), std::string::npos) << r.err;
  r = bench_train("--model " + chat_model() + " --optimizer lion --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--optimizer lion"), std::string::npos) << r.err;
  r = bench_train("--model " + chat_model() + " --dataset /nonexistent/data.jsonl --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("/nonexistent/data.jsonl"), std::string::npos) << r.err;
  // A peer file that is missing or not JSON is refused before any training (no progress line).
  r = bench_train("--model " + chat_model() + " --peer-json /nonexistent/peer.json --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find("--peer-json: cannot open /nonexistent/peer.json"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("step 1/1"), std::string::npos) << r.err;
  const std::string bad = testing::temp_dir("bench-train-peer") + "/peer.json";
  std::ofstream(bad) << "{not json";
  r = bench_train("--model " + chat_model() + " --peer-json " + bad + " --steps 1");
  EXPECT_NE(r.code, 0);
  EXPECT_NE(r.err.find(bad + " is not JSON"), std::string::npos) << r.err;
}

// The peer run's document (tools/bench_hf_peer.py --train) rides along unchanged as `peer`.
TEST(BenchTrainCli, PeerJsonIsIncludedAsItIs) {
  const std::string peer = testing::temp_dir("bench-train-peer") + "/peer.json";
  const json want = {{"framework", "transformers x, peft y"}, {"train_sft", {{"tokens_per_s", 1234.5}}}};
  std::ofstream(peer) << want.dump();
  const TrainRun r = bench_train("--model " + chat_model() + " --sequences 1 --seq-tokens 8 --steps 1 --lora-rank 2 "
                                 "--peer-json " + peer);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["peer"], want);
}

// An online iteration's document: the phases by name, each with its tokens and their rate (the
// rate is tokens over seconds), the iteration's sampled tokens exactly prompts x group x
// max-tokens (end-of-text does not stop a completion), the parts alone and the ratio over them.
// Returns the document (null when the run failed).
json online_run(const std::string& method, std::vector<std::string> want_phases) {
  const TrainRun r = bench_train("--method " + method + " --model " + chat_model() +
                                 " --prompts 2 --group 3 --max-tokens 6 --prompt-tokens 4 --iterations 2 --lora-rank 2");
  EXPECT_EQ(r.code, 0) << r.err;
  if (r.code != 0) return nullptr;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["kind"], "train_" + method);
  EXPECT_EQ(j["method"], method);
  std::vector<std::string> got;
  for (const auto& [name, p] : j["phases"].items()) {
    got.push_back(name);
    const double secs = p["seconds"].get<double>();
    EXPECT_GE(secs, 0.0) << name;
    if (secs > 0) {
      EXPECT_NEAR(p["tokens_per_s"].get<double>(), p["tokens"].get<double>() / secs, 1e-9 * p["tokens_per_s"].get<double>())
          << name;
    }
  }
  std::sort(got.begin(), got.end());
  std::sort(want_phases.begin(), want_phases.end());
  EXPECT_EQ(got, want_phases);
  EXPECT_GT(j["phases"]["sampling"]["seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["phases"]["sampling"]["tokens"], 2 * 3 * 6);
  const json& it = j["iteration"];
  EXPECT_EQ(it["sampled_tokens_each"], json::array({36, 36}));  // 2 measured iterations; the warm-up left out
  EXPECT_EQ(it["seconds_each"].size(), 2u);
  EXPECT_EQ(j["losses"].size(), 3u);  // the warm-up's too
  const double iteration_s = it["seconds"].get<double>();
  EXPECT_NEAR(iteration_s, (it["seconds_each"][0].get<double>() + it["seconds_each"][1].get<double>()) / 2, 1e-12);
  // Each trained sequence is a prompt and its completion: 4 + 6 tokens.
  for (const auto& t : it["trained_tokens_each"]) EXPECT_EQ(t.get<int64_t>() % 10, 0) << t;
  const json& parts = j["parts_alone"];
  EXPECT_GT(parts["sampling_seconds"].get<double>(), 0.0);
  EXPECT_EQ(parts["training_step_seconds_each"].size(), 2u);
  double sum = parts["sampling_seconds"].get<double>() + parts["scoring_seconds"].get<double>() +
               parts["training_step_seconds"].get<double>() + parts.value("teacher_scoring_seconds", 0.0);
  EXPECT_NEAR(parts["sum_seconds"].get<double>(), sum, 1e-12);
  EXPECT_NEAR(j["iteration_over_parts"].get<double>(), iteration_s / sum, 1e-9);
  EXPECT_NE(r.err.find("iteration 3/3"), std::string::npos) << r.err;
  return j;
}

TEST(BenchTrainCli, GrpoIterationTimesEachPhaseAndCountsItsTokens) {
  const json j = online_run("grpo", {"sampling", "scoring", "behaviour_logprobs", "forward_backward", "optimizer"});
  ASSERT_FALSE(j.is_null());
  // The built-in reward is a fraction of the completion's tokens; one mean per iteration.
  ASSERT_EQ(j["rewards"].size(), 3u);
  for (const auto& r : j["rewards"]) EXPECT_TRUE(r.get<double>() >= 0 && r.get<double>() <= 1) << r;
  // A step trains on whole groups (3 completions of 10 tokens) whose rewards differ, and only then
  // spends time in the backward.
  for (size_t i = 0; i < 2; ++i) {
    const int64_t trained = j["iteration"]["trained_tokens_each"][i].get<int64_t>();
    EXPECT_EQ(trained % 30, 0);
    EXPECT_LE(trained, 60);
  }
}

TEST(BenchTrainCli, OpdIterationTimesTheTeacherAndTrainsEveryCompletion) {
  const json j = online_run("opd", {"sampling", "scoring", "teacher_scoring", "behaviour_logprobs", "forward_backward",
                                    "optimizer"});
  ASSERT_FALSE(j.is_null());
  // The teacher scores every prompt + completion token; OPD trains on every completion.
  EXPECT_EQ(j["phases"]["teacher_scoring"]["tokens"], 2 * 3 * (4 + 6));
  EXPECT_GT(j["phases"]["teacher_scoring"]["seconds"].get<double>(), 0.0);
  EXPECT_EQ(j["iteration"]["trained_tokens_each"], json::array({60, 60}));
  EXPECT_GT(j["phases"]["forward_backward"]["seconds"].get<double>(), 0.0);
  EXPECT_GT(j["phases"]["optimizer"]["seconds"].get<double>(), 0.0);
  EXPECT_GT(j["parts_alone"]["teacher_scoring_seconds"].get<double>(), 0.0);
  ASSERT_EQ(j["reverse_kls"].size(), 3u);
  for (const auto& k : j["reverse_kls"]) EXPECT_TRUE(std::isfinite(k.get<double>())) << k;
}

// The training-grpo-v1 cpu case's own arguments (the tiny-chat model for the demo one) write a
// case result with the variant's effective_config and exactly its declared metrics, each the
// document's figure.
TEST(BenchTrainCli, GrpoCaseResultMeetsTheWorkloadsCpuCase) {
  std::ifstream wf(std::string(KILN_SOURCE_DIR) + "/qualification/workloads/training-grpo-v1.json");
  const json w = json::parse(wf);
  const json& variant = w["variants"][0];
  ASSERT_EQ(variant["id"], "cpu");
  const json& kase = variant["cases"][0];
  // One iteration of 8 tokens keeps it short; every other argument is the case's own.
  std::string args, previous;
  for (size_t i = 3; i < kase["command"].size(); ++i) {  // after "./build/kiln bench train"
    std::string a = kase["command"][i].get<std::string>();
    if (a == "${model_path}") a = chat_model();
    else if (a == "${seed}") a = "0";
    else if (previous == "--iterations") a = "1";
    else if (previous == "--max-tokens") a = "8";
    args += " " + a;
    previous = kase["command"][i].get<std::string>();
  }
  const std::string result = testing::temp_dir("bench-train-grpo-wl") + "/case.json";
  const TrainRun r = bench_train(args, "KILN_QUALIFICATION_CASE_RESULT=" + result);
  ASSERT_EQ(r.code, 0) << args << "\n" << r.err;
  const json j = json::parse(r.out);
  std::ifstream in(result);
  const json c = json::parse(in);
  EXPECT_EQ(c["case_id"], kase["id"]);
  EXPECT_EQ(c["status"], "passed");
  json want = variant["effective_config"];
  want["max_tokens"] = 8;
  EXPECT_EQ(c["effective_config"], want);
  EXPECT_EQ(testing::reported_metrics(c), testing::declared_metrics(kase));
  std::map<std::string, double> value;
  for (const auto& m : c["metrics"]) value[m["name"].get<std::string>()] = m["value"].get<double>();
  double mean_reward = 0;
  for (const auto& x : j["rewards"]) mean_reward += x.get<double>() / static_cast<double>(j["rewards"].size());
  EXPECT_EQ(value["iteration_seconds"], j["iteration"]["seconds"].get<double>());
  EXPECT_NEAR(value["mean_reward"], mean_reward, 1e-12);
  EXPECT_EQ(value["sampled_tokens_per_second"], j["iteration"]["sampled_tokens_per_s"].get<double>());
  EXPECT_EQ(value["trained_tokens_per_second"], j["iteration"]["trained_tokens_per_s"].get<double>());
  // The details are the document (emit_document adds the build stamp and switches after).
  EXPECT_EQ(c["details"]["iteration"], j["iteration"]);
  EXPECT_EQ(c["details"]["rewards"], j["rewards"]);
}

TEST(BenchTrainCli, BadOnlineFlagsAreRefusedNamingThem) {
  const std::string m = " --model " + chat_model();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--method ppo", "--method ppo: expected sft, grpo or opd"},
      {"--method grpo --group 1", "--group 1: expected 2 to 64"},
      {"--method opd --prompts 0", "--prompts 0: expected 1 to 256"},
      {"--method grpo --max-tokens 0", "--max-tokens 0: expected 1 to 32768"},
      {"--method grpo --iterations 0", "--iterations 0: expected 1 to 1000"},
      {"--method grpo --steps 2", "--steps does not apply to --method grpo"},
      {"--method opd --dataset x.jsonl", "--dataset does not apply to --method opd"},
      {"--prompts 2", "--prompts does not apply to --method sft"},
      {"--method grpo --optimizer lion", "--optimizer lion"},
  };
  for (const auto& [args, want] : cases) {
    const TrainRun r = bench_train(args + m);
    EXPECT_NE(r.code, 0) << args;
    EXPECT_NE(r.err.find(want), std::string::npos) << args << ": " << r.err;
    EXPECT_EQ(r.err.find("iteration 1/"), std::string::npos) << args << ": " << r.err;  // refused before any work
  }
}

}  // namespace
}  // namespace kiln
