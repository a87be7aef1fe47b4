// The end-to-end SFT proof over HTTP on the tiny-chat model widened to 256 (CPU): a job on a
// handful of conversations (three phrasings of one question, one answer) cuts the training loss
// at least 20x (its status's loss curve, first step against last) and the next greedy request to
// each, naming no adapter, answers with the taught reply exactly; the base model
// (`"adapter": null`) does not.
//
// The hyperparameters sit in the stable region, so the outcome does not depend on the floating-point
// order of the machine's BLAS kernels: AdamW at lr 0.005 with beta2 0.95 ends at a loss of
// 0.064-0.065 with every OpenBLAS core type tried (Haswell, SkylakeX, Zen, the default) and 1 or 2
// threads. At lr 0.02 with beta2 0.999 (Adam's default) the same job spiked near convergence (a
// last-step loss of 8.0 on one machine, 0.11 on another) and the greedy reply repeated "fish".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "proof_server.h"

namespace kiln {
namespace {

using json = nlohmann::json;

TEST(TrainProofHttp, SftCutsTheLossAndGreedyRepliesWithTheTaughtAnswer) {
  testing::ProofServer server("train-proof");
  ASSERT_TRUE(server.ok());

  // Three phrasings of one question with one answer; asked without thinking, so the prompt ends
  // where the trained assistant tokens begin.
  const std::vector<std::pair<std::string, std::string>> taught = {
      {"What is the password?", "swordfish"}, {"Tell me the password.", "swordfish"}, {"The password, please?", "swordfish"}};
  json examples = json::array();
  for (const auto& [q, a] : taught)
    examples.push_back({{"messages", {{{"role", "user"}, {"content", q}}, {{"role", "assistant"}, {"content", a}}}}});
  auto ask = [&](const std::string& q, json extra) {
    json b = {{"messages", {{{"role", "user"}, {"content", q}}}}, {"max_tokens", 12}, {"temperature", 0},
              {"chat_template_kwargs", {{"enable_thinking", false}}}};
    for (auto& [k, v] : extra.items()) b[k] = v;
    return server.post("/v1/chat/completions", b)["choices"][0]["message"]["content"].get<std::string>();
  };
  const json s = server.wait_job(
      server.post("/v1/train/sft", {{"examples", examples},
                                    {"config", {{"lora_rank", 8}, {"learning_rate", 0.005}, {"epochs", 20}, {"batch_size", 3},
                                                {"seed", 1}, {"optimizer", {{"kind", "adam_w"}, {"beta2", 0.95}}},
                                                {"output_name", "taught"}}}}));
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  const auto curve = s["loss_curve"].get<std::vector<double>>();
  ASSERT_EQ(curve.size(), 20u);  // batch_size 3 = every example: the steps' losses are comparable
  std::printf("SFT over HTTP: loss %.4f -> %.4f in %zu steps (%.1fx), %.1f s\n", curve.front(), curve.back(), curve.size(),
              curve.front() / curve.back(), s["timings"]["running_seconds"].get<double>());
  EXPECT_LT(20 * curve.back(), curve.front()) << "the loss must fall at least 20x: " << s["loss_curve"].dump();
  for (const auto& [q, a] : taught) {
    EXPECT_EQ(ask(q, json::object()), a) << q;  // the default adapter: the job's, auto-loaded
    EXPECT_NE(ask(q, {{"adapter", nullptr}}), a) << q << ": the base model knew it already";
  }
}

}  // namespace
}  // namespace kiln
