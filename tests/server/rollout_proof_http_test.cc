// The online training proofs over HTTP (CPU): a job given prompts samples its own groups from the
// adapter it trains, between its optimizer steps, through the serving engine.
// - GRPO with an eval scorer as the reward (the tiny-chat model widened to 256) raises the reward of
//   fresh samples on held-out prompts: the lower end of the 95% Wilson interval after training lies
//   above the upper end before. The reward is the test's own: a regular expression it evaluates
//   itself.
// - OPD with the base model behind a teacher-only system prompt as the teacher (a model built by
//   hand so that a system turn switches its answer) cuts the per-token reverse KL to the teacher on
//   held-out prompts at least 3x and makes the student's greedy replies the teacher's.
#include <gtest/gtest.h>

#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/wilson.h"
#include "proof_server.h"
#include "system_switch_model.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

std::vector<std::string> numbered(const std::string& stem, int from, int count) {
  std::vector<std::string> out;
  for (int i = from; i < from + count; ++i) out.push_back(stem + " " + std::to_string(i) + ".");
  return out;
}

// The whitespace-separated words of `text`.
std::vector<std::string> words(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string w; in >> w;) out.push_back(w);
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

// OPD end to end on a model built so that a system turn switches its answer
// (system_switch_model.h): the student is that model without the system turn (greedy " no ...",
// p(" yes") about 0.2 at every position), the teacher the same model behind a system prompt
// (" yes ..." at p about 0.99). The job's rollouts sample " yes" often enough for its positive
// advantage to show, and the direction that lifts it is the same at every position of every
// prompt, so the student moves toward the teacher smoothly, whatever the prompt and the kernels.
// Measured on 16 held-out prompts the job never saw: the per-token reverse KL to the teacher (the
// job's own estimate, b - q over fresh samples: a one-step OPD job on those prompts, starting from
// the adapter being measured, reports it as its first curve entry before it updates anything) and
// the greedy replies, student against teacher.
TEST(RolloutProofHttp, OpdDistilsATeacherSystemPromptIntoTheStudent) {
  testing::ProofServer server("rollout-opd",
                              [](KilnConfig& c) { testing::write_system_switch_checkpoint(c.model.path); });
  ASSERT_TRUE(server.ok());
  const std::string system = "Answer as the system asks.";
  const auto train = numbered("Question", 0, 16);
  const auto held_out = numbered("Tell me about item", 100, 16);

  auto prompts_of = [](const std::vector<std::string>& texts) {
    json prompts = json::array();
    for (const std::string& p : texts) prompts.push_back({{"messages", user(p)}});
    return prompts;
  };
  const json teacher = {{"system_prompt", system}};
  // The held-out reverse KL of the student `adapter` (empty: the base model).
  auto held_out_kl = [&](const std::string& adapter, const std::string& probe) {
    json config = {{"steps", 1},          {"group_size", 2}, {"max_tokens", 4},      {"optimizer", "sgd"},
                   {"learning_rate", 1e-6}, {"seed", 99},      {"auto_load", false},  {"output_name", probe}};
    if (!adapter.empty()) config["base_adapter"] = adapter;
    const json s = server.wait_job(server.post(
        "/v1/train/opd", {{"prompts", prompts_of(held_out)}, {"teacher", teacher}, {"config", config}}));
    EXPECT_EQ(s.value("state", ""), "completed") << s.dump();
    return s.value("reverse_kl_curve", json::array()).empty() ? 0.0 : s["reverse_kl_curve"][0].get<double>();
  };
  // The greedy 16 tokens of `adapter` (null: the base model), behind the system prompt when asked.
  auto reply = [&](const std::string& prompt, const json& adapter, bool with_system) {
    json messages = user(prompt);
    if (with_system) messages.insert(messages.begin(), json::object({{"role", "system"}, {"content", system}}));
    const json r = server.post("/v1/chat/completions",
                               {{"messages", messages}, {"temperature", 0.0}, {"max_tokens", 16}, {"adapter", adapter},
                                {"chat_template_kwargs", {{"enable_thinking", false}}}});
    return r.is_object() ? r["choices"][0]["message"].value("content", std::string()) : std::string();
  };
  // Held-out prompts whose greedy reply from the student `adapter` equals the teacher's.
  auto greedy_equal = [&](const json& adapter) {
    int equal = 0;
    for (const std::string& p : held_out) equal += reply(p, adapter, false) == reply(p, nullptr, true);
    return equal;
  };
  // The construction at work: 16 tokens of one word, the system turn switching which.
  EXPECT_EQ(words(reply(held_out[0], nullptr, false)), std::vector<std::string>(16, "no"));
  EXPECT_EQ(words(reply(held_out[0], nullptr, true)), std::vector<std::string>(16, "yes"));
  const int equal_before = greedy_equal(nullptr);
  const double kl_before = held_out_kl("", "probe-before");

  constexpr int kSteps = 6;
  const json config = {{"steps", kSteps},       {"group_size", 2},   {"max_tokens", 4},
                       {"enable_thinking", false}, {"lora_rank", 4},    {"optimizer", "adam_w"},
                       {"learning_rate", 0.005},   {"batch_size", 32},  {"seed", 7},
                       {"output_name", "rollout-opd"}};
  const json s = server.wait_job(
      server.post("/v1/train/opd", {{"prompts", prompts_of(train)}, {"teacher", teacher}, {"config", config}}));
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  ASSERT_EQ(s["reverse_kl_curve"].size(), static_cast<size_t>(kSteps)) << s.dump();
  EXPECT_TRUE(s["reward_curve"].empty());
  EXPECT_EQ(s["reverse_kl"], s["reverse_kl_curve"][kSteps - 1]);
  EXPECT_EQ(s.value("job_type", ""), "opd");

  const double kl_after = held_out_kl("rollout-opd", "probe-after");
  const int equal_after = greedy_equal("rollout-opd");
  std::printf("OPD: held-out reverse KL per token %.4f -> %.4f; greedy replies equal to the teacher's %d/16 -> %d/16; "
              "the job's reverse KL per step %s\n",
              kl_before, kl_after, equal_before, equal_after, s["reverse_kl_curve"].dump().c_str());
  EXPECT_EQ(equal_before, 0);
  EXPECT_GE(equal_after, 12);
  EXPECT_GT(kl_before, 1.0);
  EXPECT_LE(3 * kl_after, kl_before);
  EXPECT_LE(3 * s["reverse_kl_curve"][kSteps - 1].get<double>(), s["reverse_kl_curve"][0].get<double>());
}

}  // namespace
}  // namespace kiln
