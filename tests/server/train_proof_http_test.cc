// Issue #6's end-to-end SFT proof over HTTP on the tiny-chat model widened to 256 (CPU): a job on
// a handful of conversations (three phrasings of one question, one answer) cuts the training loss
// at least 5x (its status's loss curve, first step against last) and the next greedy request to
// each, naming no adapter, answers with the taught reply exactly; the base model
// (`"adapter": null`) does not.
#include <gtest/gtest.h>

#include <filesystem>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "model/init.h"
#include "server/serving_stack.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

json post(int port, const std::string& path, const json& body) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  auto r = cli.Post(path.c_str(), body.dump(), "application/json");
  EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
  return r && r->status == 200 ? json::parse(r->body) : json();
}

TEST(TrainProofHttp, SftCutsTheLossAndGreedyRepliesWithTheTaughtAnswer) {
  const std::string dir = (fs::temp_directory_path() / ("kiln-train-proof-" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  // Only the LoRA factors train, so the final norm and the random LM head fix how sharp a
  // distribution over the 151,936-token vocabulary the last hidden state can express: at tiny-chat's
  // width of 64 the best direction reaches a logit about 8 above noise of unit spread, a loss floor
  // near ln(151936) + 0.5 - 8 = 4.4 from a start near 12.9 (measured: 12.94 -> 4.42, flat after
  // that); at 256 the reachable logit is about 16 and the floor is below zero.
  ModelConfig mc = preset_config("tiny-chat").value();
  mc.hidden_size = 256;
  ASSERT_TRUE(write_random_checkpoint(mc, dir, {.quiet = true}).ok());
  for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
    fs::copy_file(testing::qwen3_dir() + "/" + f, dir + "/" + f);
  KilnConfig c;
  c.model.path = dir;
  c.model.backend = "cpu";
  c.model.max_context = 512;
  c.model.adapter_dir = dir + "/adapters";
  c.server.port = 0;
  c.memory.kv_blocks = 32;
  auto started = ServingStack::start(c);
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  std::unique_ptr<ServingStack> stack = std::move(*started);
  const int port = stack->port();

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
    return post(port, "/v1/chat/completions", b)["choices"][0]["message"]["content"].get<std::string>();
  };
  const json job = post(port, "/v1/train/sft",
                        {{"examples", examples},
                         {"config", {{"lora_rank", 8}, {"learning_rate", 0.02}, {"epochs", 20}, {"batch_size", 3},
                                     {"seed", 1}, {"optimizer", {{"kind", "adam_w"}}}, {"output_name", "taught"}}}});
  httplib::Client cli("127.0.0.1", port);
  json s;
  for (int i = 0; i < 2400; ++i) {
    auto r = cli.Get(("/v1/train/status/" + job.value("job_id", std::string())).c_str());
    if (r && r->status == 200) s = json::parse(r->body);
    const std::string st = s.value("state", "");
    if (st == "completed" || st == "failed" || st == "cancelled") break;
    std::this_thread::sleep_for(50ms);
  }
  ASSERT_EQ(s.value("state", ""), "completed") << s.dump();
  const auto curve = s["loss_curve"].get<std::vector<double>>();
  ASSERT_EQ(curve.size(), 20u);  // batch_size 3 = every example: the steps' losses are comparable
  std::printf("SFT over HTTP: loss %.4f -> %.4f in %zu steps (%.1fx), %.1f s\n", curve.front(), curve.back(), curve.size(),
              curve.front() / curve.back(), s["timings"]["running_seconds"].get<double>());
  EXPECT_LT(5 * curve.back(), curve.front()) << "the loss must fall at least 5x: " << s["loss_curve"].dump();
  for (const auto& [q, a] : taught) {
    EXPECT_EQ(ask(q, json::object()), a) << q;  // the default adapter: the job's, auto-loaded
    EXPECT_NE(ask(q, {{"adapter", nullptr}}), a) << q << ": the base model knew it already";
  }
  stack.reset();
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kiln
