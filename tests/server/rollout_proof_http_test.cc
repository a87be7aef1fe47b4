// The online training proofs over HTTP on the tiny-chat model widened to 256 (CPU): a job given
// prompts samples its own groups from the adapter it trains, between its optimizer steps, through
// the serving engine.
// - GRPO with an eval scorer as the reward raises the reward of fresh samples on held-out prompts:
//   the lower end of the 95% Wilson interval after training lies above the upper end before.
// - OPD with the base model behind a teacher-only system prompt as the teacher: the job runs and
//   reports each step's per-token reverse KL to the teacher.
// The reward is the test's own: a regular expression it evaluates itself.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/wilson.h"
#include "proof_server.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

std::vector<std::string> numbered(const std::string& stem, int from, int count) {
  std::vector<std::string> out;
  for (int i = from; i < from + count; ++i) out.push_back(stem + " " + std::to_string(i) + ".");
  return out;
}

// 1 when the completion's first non-space character is an ASCII letter.
bool letter_first(const std::string& text) {
  for (unsigned char ch : text) {
    if (ch == ' ' || ch == '\n' || ch == '\t' || ch == '\r') continue;
    const unsigned char lower = static_cast<unsigned char>(ch | 0x20);
    return lower >= 'a' && lower <= 'z';
  }
  return false;
}

// Why top_k 8 and one token: as in grpo_proof_http_test.cc, the random model is nearly uniform over
// the vocabulary, and the reward has no direction of its own in the random LM head; over a handful
// of candidates (the chat template's last tokens, the same for every prompt, make them largely the
// same candidates) lifting the rewarded ones is the whole job, and it carries to prompts never
// trained on.
TEST(RolloutProofHttp, GrpoFromPromptsRaisesTheRewardOfHeldOutPrompts) {
  testing::ProofServer server("rollout-grpo");
  ASSERT_TRUE(server.ok());
  const auto train = numbered("Say a word, please, number", 0, 16);
  const auto held_out = numbered("Tell me something, item", 100, 16);
  constexpr int kSamples = 8;
  auto passes = [&](uint64_t seed) {
    int64_t passed = 0, n = 0;
    for (size_t p = 0; p < held_out.size(); ++p) {
      const json r = server.post("/v1/chat/completions",
                                 {{"messages", user(held_out[p])}, {"n", kSamples}, {"temperature", 1.0}, {"top_k", 8},
                                  {"seed", seed + 100 * p}, {"max_tokens", 1},
                                  {"chat_template_kwargs", {{"enable_thinking", false}}}});
      for (const json& ch : r.value("choices", json::array()))
        passed += letter_first(ch["message"]["content"].get<std::string>()), ++n;
    }
    EXPECT_EQ(n, static_cast<int64_t>(held_out.size()) * kSamples);
    return std::pair<int64_t, int64_t>(passed, n);
  };
  const auto [before, n_before] = passes(1000000);

  json prompts = json::array();
  for (const std::string& p : train) prompts.push_back({{"messages", user(p)}});
  const json config = {{"steps", 4},          {"group_size", 8},       {"temperature", 1.0},
                       {"top_k", 8},          {"max_tokens", 1},       {"enable_thinking", false},
                       {"lora_rank", 8},      {"learning_rate", 0.002}, {"optimizer", "adam_w"},
                       {"batch_size", 128},   {"seed", 7},             {"output_name", "rollout-grpo"}};
  const json job = server.post("/v1/train/grpo", {{"prompts", prompts},
                                                  {"reward", {{"scorer", {{"type", "regex"}, {"pattern", "^\\s*[A-Za-z]"}}}}},
                                                  {"config", config}});
  const json s = server.wait_job(job);
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  ASSERT_EQ(s["reward_curve"].size(), 4u) << s.dump();
  EXPECT_EQ(s["loss_curve"].size(), 4u);
  EXPECT_TRUE(s["reverse_kl_curve"].empty());

  const auto [after, n_after] = passes(1500000);  // the job's adapter is now the default
  const Interval b = wilson_interval(before, n_before), a = wilson_interval(after, n_after);
  std::printf("GRPO from prompts: held-out reward %lld/%lld [%.3f, %.3f] -> %lld/%lld [%.3f, %.3f]; rollouts' mean "
              "reward per step %s\n",
              static_cast<long long>(before), static_cast<long long>(n_before), b.low, b.high,
              static_cast<long long>(after), static_cast<long long>(n_after), a.low, a.high, s["reward_curve"].dump().c_str());
  EXPECT_GT(a.low, b.high);
}

// OPD end to end: the job samples from the student, the teacher (the base model behind a system
// prompt) scores every sampled token, and each step's mean per-token reverse KL reaches the status.
// Before any step the student is the base model without the system prompt, so the first step's
// figure is the reverse KL of the base model to itself with the system prompt: positive, and small
// on this random model (measured 0.026 per token). A proof that training cuts it is not here: on
// this random model the teacher's distribution is as flat as the student's, and ten AdamW steps
// (lr 0.003, top_k 8, 16 tokens) raised it to 0.77 (docs/training.md, "Online runs").
TEST(RolloutProofHttp, OpdReportsTheReverseKlOfEachStepsRolloutToTheTeacher) {
  testing::ProofServer server("rollout-opd");
  ASSERT_TRUE(server.ok());
  json prompts = json::array();
  for (const std::string& p : numbered("Question", 0, 2)) prompts.push_back({{"messages", user(p)}});
  const json config = {{"steps", 2},      {"group_size", 2},     {"max_tokens", 4},       {"top_k", 8},
                       {"lora_rank", 2},  {"optimizer", "sgd"},  {"learning_rate", 1e-4}, {"output_name", "rollout-opd"}};
  const json job = server.post(
      "/v1/train/opd",
      {{"prompts", prompts}, {"teacher", {{"system_prompt", "You are a pirate. Answer as one."}}}, {"config", config}});
  const json s = server.wait_job(job);
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  ASSERT_EQ(s["reverse_kl_curve"].size(), 2u) << s.dump();
  EXPECT_TRUE(s["reward_curve"].empty());
  EXPECT_GT(s["reverse_kl_curve"][0].get<double>(), 0.0);
  EXPECT_EQ(s["reverse_kl"], s["reverse_kl_curve"][1]);
  EXPECT_EQ(s.value("job_type", ""), "opd");
}

}  // namespace
}  // namespace kiln
