// Online training jobs on the CUDA backend, end to end through the server: a GRPO job from prompts
// rewarded by a scorer, and an OPD job whose teacher is the base model (behind a system prompt),
// each sampling its rollouts through the engine on the device, training there, and completing
// with a finite loss, reward or reverse-KL figure for every step.
#include <cmath>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/cuda/cuda_test_util.h"
#include "server/proof_server.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json prompts(int count) {
  json out = json::array();
  for (int i = 0; i < count; ++i)
    out.push_back({{"messages", json::array({{{"role", "user"}, {"content", "Name a colour, number " + std::to_string(i)}}})},
                   {"reference", "red"}});
  return out;
}

void expect_finite_curve(const json& status, const char* curve, size_t steps) {
  ASSERT_EQ(status[curve].size(), steps) << curve << ": " << status.dump();
  for (const json& v : status[curve]) EXPECT_TRUE(v.is_number() && std::isfinite(v.get<double>())) << curve << ": " << v;
}

void on_cuda(KilnConfig& c) { c.model.backend = "cuda"; }

TEST(CudaOnlineTraining, GrpoFromPromptsCompletesWithFiniteCurves) {
  KILN_CUDA_OR_SKIP(be);
  be.reset();  // the server makes its own
  testing::ProofServer server("cuda-online-grpo", on_cuda);
  ASSERT_TRUE(server.ok());
  const json config = {{"steps", 3},     {"group_size", 4}, {"temperature", 1.0}, {"top_k", 8},
                       {"max_tokens", 8}, {"lora_rank", 4},  {"seed", 7},          {"output_name", "cuda-online-grpo"}};
  const json job = server.post("/v1/train/grpo", {{"prompts", prompts(4)},
                                                  {"reward", {{"scorer", {{"type", "regex"}, {"pattern", "^\\s*[A-Za-z]"}}}}},
                                                  {"config", config}});
  const json s = server.wait_job(job);
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  expect_finite_curve(s, "loss_curve", 3);
  expect_finite_curve(s, "reward_curve", 3);
  for (const json& r : s["reward_curve"]) EXPECT_TRUE(r.get<double>() >= 0 && r.get<double>() <= 1) << r;
}

TEST(CudaOnlineTraining, OpdWithTheBaseAsTeacherCompletesWithFiniteCurves) {
  KILN_CUDA_OR_SKIP(be);
  be.reset();
  testing::ProofServer server("cuda-online-opd", on_cuda);
  ASSERT_TRUE(server.ok());
  json p = prompts(2);
  for (json& x : p) x.erase("reference");
  const json config = {{"steps", 2},     {"group_size", 2},   {"max_tokens", 6}, {"top_k", 8},
                       {"lora_rank", 2}, {"optimizer", "sgd"}, {"output_name", "cuda-online-opd"}};
  const json job = server.post(
      "/v1/train/opd", {{"prompts", p}, {"teacher", {{"system_prompt", "Answer in one word."}}}, {"config", config}});
  const json s = server.wait_job(job);
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  expect_finite_curve(s, "loss_curve", 2);
  expect_finite_curve(s, "reverse_kl_curve", 2);
  // The teacher is the base model with a system prompt the student lacks: a positive divergence.
  EXPECT_GT(s["reverse_kl_curve"][0].get<double>(), 0.0);
}

}  // namespace
}  // namespace kiln
