// The online form of /v1/train/grpo and /v1/train/opd over HTTP: every refusal is a 400 (404 for an
// unknown teacher adapter) naming the field; the configured reward server's scores become the
// rollouts' rewards (the test's server computes and records them); a reward server that keeps
// failing fails the job with an error naming training.reward_url after its retries.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "loopback_server.h"
#include "proof_server.h"

namespace kiln {
namespace {

using json = nlohmann::json;

json user(const std::string& text) { return json::array({{{"role", "user"}, {"content", text}}}); }

std::pair<int, json> post(const testing::ProofServer& s, const std::string& path, const json& body) {
  return s.post_any(path, body);
}

// A reward server on a free port: `handler` answers each call of POST /score.
struct RewardServer : testing::LoopbackServer {
  explicit RewardServer(std::function<void(const httplib::Request&, httplib::Response&)> handler)
      : LoopbackServer([&](httplib::Server& s) { s.Post("/score", std::move(handler)); }), port(LoopbackServer::port()) {}
  int port;
};

TEST(RolloutHttp, BadOnlineRequestsAre400NamingTheField) {
  testing::ProofServer s("rollout-400");
  ASSERT_TRUE(s.ok());
  const json p = json::array({{{"messages", user("hi")}, {"reference", "x"}}});
  const json exact = {{"scorer", "exact"}};
  std::vector<json> many;
  for (int i = 0; i < 257; ++i) many.push_back({{"messages", user("hi")}, {"reference", "x"}});
  std::vector<json> sixty_four(64, json{{"messages", user("hi")}, {"reference", "x"}});
  struct Case {
    const char* route;
    json body;
    std::string param;
    int status = 400;
  };
  const std::vector<Case> cases = {
      {"grpo", {{"prompts", "nope"}, {"reward", exact}}, "prompts"},
      {"grpo", {{"prompts", json::array()}, {"reward", exact}}, "prompts"},
      {"grpo", {{"prompts", many}, {"reward", exact}}, "prompts"},
      {"grpo", {{"prompts", p}}, "reward"},
      {"grpo", {{"prompts", p}, {"reward", {{"server", true}}}}, "reward.server"},
      {"grpo", {{"prompts", p}, {"reward", {{"scorer", "exact"}, {"server", true}}}}, "reward"},
      {"grpo", {{"prompts", p}, {"reward", {{"scorer", "telepathy"}}}}, "reward.scorer"},
      {"grpo", {{"prompts", {{{"messages", user("hi")}}}}, {"reward", exact}}, "prompts[0].reference"},
      {"grpo", {{"prompts", {{{"reference", "x"}}}}, {"reward", exact}}, "prompts[0].messages"},
      {"grpo", {{"prompts", {{{"messages", {{{"role", "user"}}}}, {"reference", "x"}}}}, {"reward", exact}},
       "prompts[0].messages[0]"},
      {"grpo", {{"prompts", p}, {"groups", json::array()}, {"reward", exact}}, "prompts"},
      {"grpo", {{"groups", json::array({1})}, {"reward", exact}}, "reward"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"group_size", 1}}}}, "config.group_size"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"group_size", 65}}}}, "config.group_size"},
      {"grpo", {{"prompts", sixty_four}, {"reward", exact}, {"config", {{"group_size", 64}}}}, "config.group_size"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"max_tokens", 1025}}}}, "config.max_tokens"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"max_tokens", 600}}}}, "prompts[0].messages"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"steps", 0}}}}, "config.steps"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"steps", 1001}}}}, "config.steps"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"temperature", 0}}}}, "config.temperature"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"top_p", 1.5}}}}, "config.top_p"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"epochs", 2}}}}, "config.epochs"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"eval_fraction", 0.5}}}}, "config.eval_fraction"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"reward_coeff", 1}}}}, "config.reward_coeff"},
      {"grpo", {{"prompts", p}, {"reward", exact}, {"config", {{"reward_url", "http://x/"}}}}, "config.reward_url"},
      {"grpo", {{"groups", json::array()}, {"config", {{"group_size", 4}}}}, "config.group_size"},
      {"opd", {{"groups", json::array()}}, "groups"},
      {"opd", {{"prompts", p}, {"teacher", {{"url", "http://teacher/"}}}}, "teacher.url"},
      {"opd", {{"prompts", p}, {"teacher", {{"adapter", "nobody"}}}}, "teacher.adapter", 404},
      {"opd", {{"prompts", p}, {"teacher", {{"system_prompt", 3}}}}, "teacher.system_prompt"},
      {"opd", {{"prompts", p}, {"config", {{"clip_epsilon", 0.1}}}}, "config.clip_epsilon"},
  };
  for (const Case& c : cases) {
    const auto [status, body] = post(s, std::string("/v1/train/") + c.route, c.body);
    EXPECT_EQ(status, c.status) << c.route << " " << c.body.dump().substr(0, 200) << " -> " << body.dump();
    const json param = body.is_object() && body.contains("error") ? body["error"].value("param", json()) : json();
    EXPECT_TRUE(param.is_string() && param.get<std::string>().rfind(c.param, 0) == 0)
        << c.route << " " << c.body.dump().substr(0, 200) << ": param " << param.dump() << ", wanted " << c.param
        << " (" << body.dump() << ")";
  }
}

// A GRPO job whose rollouts follow a response_format: the random model writes noise, so without
// the constraint almost no rollout validates against the schema, and with it every rollout does
// (the reward is the json_schema scorer against the same schema: 1.0).
TEST(RolloutHttp, AResponseFormatConstrainsEveryRollout) {
  testing::ProofServer s("rollout-schema");
  ASSERT_TRUE(s.ok());
  const json schema = {{"type", "object"},
                       {"properties", {{"ok", {{"type", "boolean"}}}, {"n", {{"enum", {1, 2, 3}}}}}},
                       {"required", {"ok", "n"}},
                       {"additionalProperties", false}};
  const json prompts = {{{"messages", user("Answer as JSON.")}}, {{"messages", user("Again, as JSON.")}}};
  auto body = [&](bool constrained, const std::string& name) {
    json b = {{"prompts", prompts},
              {"reward", {{"scorer", {{"type", "json_schema"}, {"schema", schema}}}}},
              {"config", {{"steps", 1}, {"group_size", 4}, {"max_tokens", 48}, {"lora_rank", 2}, {"output_name", name}}}};
    if (constrained)
      b["response_format"] = {{"type", "json_schema"}, {"json_schema", {{"name", "answer"}, {"schema", schema}}}};
    return b;
  };
  const json on = s.wait_job(s.post("/v1/train/grpo", body(true, "schema-on")));
  ASSERT_EQ(on.value("state", ""), "completed") << on.dump();
  ASSERT_EQ(on["reward_curve"].size(), 1u);
  for (const json& r : on["reward_curve"]) EXPECT_EQ(r.get<double>(), 1.0) << on.dump();
  const json off = s.wait_job(s.post("/v1/train/grpo", body(false, "schema-off")));
  ASSERT_EQ(off.value("state", ""), "completed") << off.dump();
  for (const json& r : off["reward_curve"]) EXPECT_LT(r.get<double>(), 0.5) << off.dump();
  // Offline jobs (finished groups) have no rollouts to constrain.
  const auto [status, refused] = post(s, "/v1/train/grpo", {{"groups", json::array()}, {"response_format", {{"type", "json_object"}}}});
  EXPECT_EQ(status, 400);
  EXPECT_EQ(refused["error"].value("param", ""), "response_format") << refused.dump();
}

TEST(RolloutHttp, TheRewardServersScoresAreTheRolloutsRewards) {
  std::mutex mu;
  std::vector<double> call_sums;  // the sum of the scores of each call, in order
  std::vector<json> bodies;
  RewardServer rewards([&](const httplib::Request& req, httplib::Response& res) {
    const json b = json::parse(req.body);
    json scores = json::array();
    double sum = 0;
    for (const json& c : b["completions"]) {
      const double v = static_cast<double>(c.get<std::string>().size() % 3);  // 0, 1 or 2
      scores.push_back(v);
      sum += v;
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      call_sums.push_back(sum);
      bodies.push_back(b);
    }
    res.set_content(json{{"scores", scores}}.dump(), "application/json");
  });
  testing::ProofServer s("rollout-reward", [&](KilnConfig& c) {
    c.training.reward_url = "http://127.0.0.1:" + std::to_string(rewards.port) + "/score";
  });
  ASSERT_TRUE(s.ok());
  const json prompts = {{{"messages", user("Write anything.")}, {"reference", "r0"}}, {{"messages", user("More.")}}};
  const json job = s.post("/v1/train/grpo", {{"prompts", prompts},
                                             {"reward", {{"server", true}}},
                                             {"config", {{"steps", 2}, {"group_size", 4}, {"max_tokens", 3},
                                                         {"lora_rank", 2}, {"output_name", "rewarded"}}}});
  const json st = s.wait_job(job);
  ASSERT_EQ(st.value("state", ""), "completed") << st.dump();
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(call_sums.size(), 4u);  // one call per prompt per step
  ASSERT_EQ(st["reward_curve"].size(), 2u);
  for (size_t step = 0; step < 2; ++step)
    EXPECT_DOUBLE_EQ(st["reward_curve"][step].get<double>(), (call_sums[2 * step] + call_sums[2 * step + 1]) / 8.0);
  EXPECT_EQ(bodies[0]["prompt"], user("Write anything."));
  EXPECT_EQ(bodies[0]["reference"], "r0");
  EXPECT_TRUE(bodies[1]["reference"].is_null());
  EXPECT_EQ(bodies[0]["completions"].size(), 4u);
}

TEST(RolloutHttp, AFailingRewardServerFailsTheJobAfterItsRetries) {
  std::atomic<int> calls{0};
  RewardServer rewards([&](const httplib::Request&, httplib::Response& res) {
    ++calls;
    res.status = 500;
    res.set_content("down", "text/plain");
  });
  testing::ProofServer s("rollout-reward-down", [&](KilnConfig& c) {
    c.training.reward_url = "http://127.0.0.1:" + std::to_string(rewards.port) + "/score";
    c.training.reward_retries = 1;
  });
  ASSERT_TRUE(s.ok());
  const json job = s.post("/v1/train/grpo", {{"prompts", {{{"messages", user("Hi.")}}}},
                                             {"reward", {{"server", true}}},
                                             {"config", {{"steps", 2}, {"group_size", 2}, {"max_tokens", 2},
                                                         {"lora_rank", 2}, {"output_name", "unrewarded"}}}});
  const json st = s.wait_job(job);
  ASSERT_EQ(st.value("state", ""), "failed") << st.dump();
  const std::string error = st.value("error", "");
  EXPECT_NE(error.find("training.reward_url"), std::string::npos) << error;
  EXPECT_NE(error.find("HTTP 500"), std::string::npos) << error;
  EXPECT_NE(error.find("after 2 attempts"), std::string::npos) << error;
  EXPECT_NE(error.find("step 1"), std::string::npos) << error;
  EXPECT_EQ(calls.load(), 2);
}

}  // namespace
}  // namespace kiln
