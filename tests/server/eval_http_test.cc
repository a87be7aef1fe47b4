// Evaluation over HTTP on the tiny-chat model (CPU): suites registered and refused naming the
// field, 404s, a run on the base model, an SFT adapter trained on the suite's taught answers
// with a post-training eval, the adapter's run more accurate than the base model's, seeded
// reruns reproducing every outcome, compare's flips agreeing with the two runs, min_accuracy
// keeping a worse adapter from being auto-loaded, and dataset-to-suite synthesis with the
// held-out split excluded from training.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
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

const std::string& model_dir() {
  static const std::string dir = [] {
    const std::string d = (fs::temp_directory_path() / ("kiln-eval-http-" + std::to_string(::getpid()))).string();
    fs::remove_all(d);
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny-chat").value(), d, {}).ok());
    for (const char* f : {"tokenizer.json", "tokenizer_config.json"})
      fs::copy_file(testing::qwen3_dir() + "/" + f, d + "/" + f);
    std::atexit([] { fs::remove_all(fs::temp_directory_path() / ("kiln-eval-http-" + std::to_string(::getpid()))); });
    return d;
  }();
  return dir;
}

KilnConfig test_config() {
  static int n = 0;
  KilnConfig c;
  c.model.path = model_dir();
  c.model.backend = "cpu";
  c.model.max_context = 512;
  c.model.adapter_dir = model_dir() + "/run-" + std::to_string(++n) + "/adapters";
  c.server.state_dir = model_dir() + "/run-" + std::to_string(n);
  c.server.port = 0;
  c.server.max_decode_batch = 4;
  c.server.max_body_bytes = 8 << 20;
  c.memory.kv_blocks = 64;
  return c;
}

struct Server {
  Server() : config(test_config()) {
    auto s = ServingStack::start(config);
    if (!s.ok()) ADD_FAILURE() << s.status().to_string();
    else stack = std::move(*s);
  }
  json call(const std::string& method, const std::string& path, const json& body, int want) const {
    httplib::Client cli("127.0.0.1", stack->port());
    cli.set_read_timeout(120, 0);
    httplib::Result r = method == "GET"      ? cli.Get(path.c_str())
                        : method == "DELETE" ? cli.Delete(path.c_str())
                                             : cli.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r) << method << " " << path << ": no response";
    if (!r) return {};
    EXPECT_EQ(r->status, want) << method << " " << path << ": " << r->body;
    return json::parse(r->body);
  }
  json post(const std::string& path, const json& body, int want = 200) const { return call("POST", path, body, want); }
  json get(const std::string& path, int want = 200) const { return call("GET", path, nullptr, want); }
  json wait(const std::string& status_path, int secs = 300) const {
    json s;
    for (int i = 0; i < secs * 20; ++i) {
      s = get(status_path);
      const std::string st = s.value("state", "");
      if (st == "completed" || st == "failed" || st == "cancelled") return s;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << status_path << " did not end: " << s.dump();
    return s;
  }
  json eval(const json& body, const std::string& route = "/v1/eval/run") const {
    json job = post(route, body);
    return wait("/v1/eval/jobs/" + job["job_id"].get<std::string>());
  }
  KilnConfig config;
  std::unique_ptr<ServingStack> stack;
};

json user(const std::string& c) { return json::array({{{"role", "user"}, {"content", c}}}); }

const char* kPrompts[] = {"What is the password?", "Tell me the password.", "The password, please?"};

json taught_suite() {
  json ex = json::array();
  for (const char* p : kPrompts) ex.push_back({{"messages", user(p)}, {"expected", "swordfish"}, {"scorer", "contains"}});
  // The template renders a past assistant turn with an empty think block; without thinking the
  // prompt ends where the trained targets began.
  return {{"name", "pw"}, {"max_tokens", 8}, {"chat_template_kwargs", {{"enable_thinking", false}}}, {"examples", ex}};
}

json training_examples() {
  json ex = json::array();
  for (int r = 0; r < 2; ++r)
    for (const char* p : kPrompts)
      ex.push_back({{"messages", {{{"role", "user"}, {"content", p}}, {{"role", "assistant"}, {"content", "swordfish swordfish swordfish"}}}}});
  return ex;
}

std::vector<std::string> outputs(const json& job) {
  std::vector<std::string> out;
  for (const json& o : job["outcomes"]) out.push_back(o["output"]);
  return out;
}

TEST(EvalHttp, BadRequestsNameTheFieldAndUnknownsAre404) {
  Server s;
  ASSERT_TRUE(s.stack);
  json bad = taught_suite();
  bad["examples"][2].erase("expected");
  EXPECT_EQ(s.post("/v1/eval/suites", bad, 400)["error"]["param"], "examples[2].expected");
  bad = taught_suite();
  bad["examples"][1]["scorer"] = {{"type", "numeric_tolerance"}, {"tolerance", -1}};
  EXPECT_EQ(s.post("/v1/eval/suites", bad, 400)["error"]["param"], "examples[1].scorer.tolerance");
  EXPECT_EQ(s.post("/v1/eval/suites", taught_suite())["examples"], 3);
  EXPECT_EQ(s.post("/v1/eval/suites", taught_suite(), 409)["error"]["code"], "suite_exists");
  // Stored beside the adapter directory, readable.
  EXPECT_TRUE(fs::exists(fs::path(s.config.model.adapter_dir).parent_path() / "eval-suites" / "pw" / "examples.jsonl"));
  EXPECT_EQ(s.get("/v1/eval/suites")["data"].size(), 1u);
  EXPECT_EQ(s.get("/v1/eval/suites/pw")["examples"][0]["scorer"]["type"], "contains");
  EXPECT_EQ(s.post("/v1/eval/run", {{"suite", "nope"}}, 404)["error"]["code"], "suite_not_found");
  EXPECT_EQ(s.post("/v1/eval/run", {{"suite", "pw"}, {"adapter", "ghost"}}, 404)["error"]["code"], "adapter_not_found");
  EXPECT_EQ(s.post("/v1/eval/run", {{"suite", "pw"}, {"seed", -1}}, 400)["error"]["param"], "seed");
  EXPECT_EQ(s.post("/v1/eval/run", {{"suite", "pw"}, {"adapters", "x"}}, 400)["error"]["param"], "adapters");
  EXPECT_EQ(s.post("/v1/eval/compare", {{"suite", "pw"}, {"adapter_a", nullptr}}, 400)["error"]["param"], "adapter_b");
  EXPECT_EQ(s.get("/v1/eval/jobs/job-nope", 404)["error"]["code"], "job_not_found");
  EXPECT_EQ(s.get("/v1/eval/suites/nope", 404)["error"]["code"], "suite_not_found");
  EXPECT_EQ(s.post("/v1/train/sft", {{"examples", training_examples()}, {"config", {{"post_eval", {{"suite", "nope"}}}}}}, 404)["error"]["param"],
            "config.post_eval.suite");
  EXPECT_EQ(s.post("/v1/train/sft", {{"examples", training_examples()}, {"config", {{"post_eval", {{"suite", "pw"}, {"min_accuracy", 2}}}}}}, 400)["error"]["param"],
            "config.post_eval.min_accuracy");
  EXPECT_TRUE(s.call("DELETE", "/v1/eval/suites/pw", nullptr, 200)["deleted"]);
  EXPECT_EQ(s.get("/v1/eval/suites")["data"].size(), 0u);
}

TEST(EvalHttp, TrainedAdapterScoresHigherRerunsReproduceAndCompareCountsFlips) {
  Server s;
  ASSERT_TRUE(s.stack);
  s.post("/v1/eval/suites", taught_suite());
  json base = s.eval({{"suite", "pw"}, {"seed", 7}});
  ASSERT_EQ(base["state"], "completed") << base.dump();
  EXPECT_TRUE(base["adapter"].is_null());
  EXPECT_EQ(base["progress"]["done"], 3);
  EXPECT_EQ(base["total"], 3);
  ASSERT_EQ(base["outcomes"].size(), 3u);
  EXPECT_EQ(base["outcomes"][1]["prompt"], user(kPrompts[1]));

  json job = s.post("/v1/train/sft", {{"examples", training_examples()},
                                      {"config", {{"lora_rank", 4}, {"learning_rate", 0.01}, {"epochs", 6}, {"seed", 3},
                                                  {"optimizer", {{"kind", "adam_w"}}}, {"output_name", "pw"},
                                                  {"post_eval", {{"suite", "pw"}, {"min_accuracy", 0.5}}}}}});
  json done = s.wait("/v1/train/status/" + job["job_id"].get<std::string>());
  ASSERT_EQ(done["state"], "completed") << done.dump();
  const json& pe = done["post_eval"];
  ASSERT_TRUE(pe.is_object()) << done.dump();
  EXPECT_EQ(pe["suite"], "pw");
  EXPECT_EQ(pe["auto_load_skipped"], false) << pe.dump();
  EXPECT_EQ(done["adapter_revision"], 1);  // loaded after the eval passed the threshold
  std::ifstream rf(s.config.model.adapter_dir + "/pw/train_receipt.json");
  json receipt = json::parse(rf);
  EXPECT_EQ(receipt["post_eval"]["eval_job_id"], pe["eval_job_id"]);
  EXPECT_EQ(receipt["post_eval"]["accuracy"], pe["accuracy"]);

  json tuned = s.eval({{"suite", "pw"}, {"adapter", "pw"}, {"seed", 7}});
  ASSERT_EQ(tuned["state"], "completed") << tuned.dump();
  EXPECT_EQ(tuned["adapter"], json({{"name", "pw"}, {"revision", 1}}));
  EXPECT_GT(tuned["accuracy"].get<double>(), base["accuracy"].get<double>()) << base.dump() << "\n" << tuned.dump();
  std::printf("base accuracy %s %s, adapter accuracy %s %s, post_eval %s\n", base["accuracy"].dump().c_str(),
              base["wilson"].dump().c_str(), tuned["accuracy"].dump().c_str(), tuned["wilson"].dump().c_str(),
              pe.dump().c_str());
  // The post-training eval ran the same suite greedily with seed 0 on the same weights.
  json tuned0 = s.eval({{"suite", "pw"}, {"adapter", "pw"}});
  EXPECT_EQ(tuned0["accuracy"], pe["accuracy"]);
  // Passing is what the scorer says of the text: "contains swordfish", checked here independently.
  for (const json& o : tuned["outcomes"])
    EXPECT_EQ(o["passed"].get<bool>(), o["output"].get<std::string>().find("swordfish") != std::string::npos) << o.dump();

  // Same seed, adapter revision and suite: the same outcomes, greedy and sampled.
  json again = s.eval({{"suite", "pw"}, {"adapter", "pw"}, {"seed", 7}});
  EXPECT_EQ(outputs(again), outputs(tuned));
  EXPECT_EQ(again["outcomes"], tuned["outcomes"]);
  json hot1 = s.eval({{"suite", "pw"}, {"adapter", "pw"}, {"seed", 11}, {"temperature", 1.0}});
  json hot2 = s.eval({{"suite", "pw"}, {"adapter", "pw"}, {"seed", 11}, {"temperature", 1.0}});
  EXPECT_EQ(outputs(hot1), outputs(hot2));
  json base_again = s.eval({{"suite", "pw"}, {"seed", 7}});
  EXPECT_EQ(base_again["outcomes"], base["outcomes"]);

  // Compare base (a) with the adapter (b): pairs are the two runs' outcomes, flips counted from them.
  json cmp = s.eval({{"suite", "pw"}, {"adapter_a", nullptr}, {"adapter_b", "pw"}, {"seed", 7}}, "/v1/eval/compare");
  ASSERT_EQ(cmp["state"], "completed") << cmp.dump();
  EXPECT_EQ(cmp["progress"]["total"], 6);
  int a_only = 0, b_only = 0, both = 0, none = 0;
  for (size_t i = 0; i < 3; ++i) {
    const bool pa = base["outcomes"][i]["passed"], pb = tuned["outcomes"][i]["passed"];
    EXPECT_EQ(cmp["pairs"][i]["a"]["output"], base["outcomes"][i]["output"]);
    EXPECT_EQ(cmp["pairs"][i]["b"]["output"], tuned["outcomes"][i]["output"]);
    a_only += pa && !pb;
    b_only += pb && !pa;
    both += pa && pb;
    none += !pa && !pb;
    EXPECT_EQ(cmp["pairs"][i]["flip"], pa == pb ? json(nullptr) : json(pa ? "a_only" : "b_only"));
  }
  EXPECT_GT(b_only, 0);
  EXPECT_EQ(cmp["flips"], json({{"a_only", a_only}, {"b_only", b_only}, {"both_pass", both}, {"both_fail", none}}));
  EXPECT_EQ(cmp["a"]["accuracy"], base["accuracy"]);
  EXPECT_EQ(cmp["b"]["accuracy"], tuned["accuracy"]);
  EXPECT_GE(s.get("/v1/eval/jobs")["data"].size(), 8u);
}

TEST(EvalHttp, MinAccuracyPublishesButDoesNotAutoLoad) {
  Server s;
  ASSERT_TRUE(s.stack);
  s.post("/v1/eval/suites", taught_suite());
  // One tiny step barely moves the adapter: the base model's accuracy on this suite is 0.
  json job = s.post("/v1/train/sft", {{"examples", json::array({training_examples()[0]})},
                                      {"config", {{"lora_rank", 2}, {"learning_rate", 1e-6}, {"epochs", 1}, {"output_name", "weak"},
                                                  {"post_eval", {{"suite", "pw"}, {"min_accuracy", 1.0}}}}}});
  json done = s.wait("/v1/train/status/" + job["job_id"].get<std::string>());
  ASSERT_EQ(done["state"], "completed") << done.dump();
  const json& pe = done["post_eval"];
  ASSERT_TRUE(pe["accuracy"].is_number()) << pe.dump();
  ASSERT_LT(pe["accuracy"].get<double>(), 1.0) << pe.dump();
  EXPECT_EQ(pe["auto_load_skipped"], true);
  EXPECT_NE(pe["reason"].get<std::string>().find("min_accuracy"), std::string::npos);
  EXPECT_TRUE(done["adapter_revision"].is_null());
  EXPECT_TRUE(fs::exists(s.config.model.adapter_dir + "/weak/adapter_model.safetensors"));
  json adapters = s.get("/v1/adapters");
  EXPECT_TRUE(adapters["default_adapter"].is_null()) << adapters.dump();
  for (const json& a : adapters["data"]) EXPECT_NE(a["name"], "weak") << adapters.dump();
}

TEST(EvalHttp, SynthesizeHoldsOutASeededSplitThatTrainingCanExclude) {
  Server s;
  ASSERT_TRUE(s.stack);
  json data = json::array();
  for (int i = 0; i < 6; ++i)
    data.push_back({{"messages", {{{"role", "user"}, {"content", "q" + std::to_string(i)}},
                                  {{"role", "assistant"}, {"content", std::to_string(i * 10)}}}}});
  json suite = s.post("/v1/eval/synthesize", {{"name", "held"}, {"examples", data}, {"holdout_fraction", 0.5}, {"seed", 4}});
  EXPECT_EQ(suite["examples"], 3);
  EXPECT_EQ(suite["source"], "synthesize");
  EXPECT_EQ(suite["scorers"], json({{"numeric_tolerance", 3}}));  // auto-detected from "0", "10", ...
  const auto idx = suite["holdout"]["source_indices"].get<std::vector<int>>();
  ASSERT_EQ(idx.size(), 3u);
  json detail = s.get("/v1/eval/suites/held");
  for (size_t k = 0; k < 3; ++k) {
    EXPECT_EQ(detail["examples"][k]["expected"], std::to_string(idx[k] * 10));
    EXPECT_EQ(detail["examples"][k]["messages"], user("q" + std::to_string(idx[k])));
  }
  json bad = data;
  bad[4]["messages"].erase(1);
  EXPECT_EQ(s.post("/v1/eval/synthesize", {{"name", "x"}, {"examples", bad}}, 400)["error"]["param"], "examples[4].messages");
  // Training told to avoid the split: only the held-out ones -> nothing left (400); all -> queued.
  json held_only = json::array();
  for (int i : idx) held_only.push_back(data[static_cast<size_t>(i)]);
  EXPECT_EQ(s.post("/v1/train/sft", {{"examples", held_only}, {"config", {{"exclude_suite", "held"}}}}, 400)["error"]["param"],
            "config.exclude_suite");
  json job = s.post("/v1/train/sft", {{"examples", data}, {"config", {{"exclude_suite", "held"}, {"lora_rank", 2}, {"auto_load", false}}}});
  json done = s.wait("/v1/train/status/" + job["job_id"].get<std::string>());
  EXPECT_EQ(done["state"], "completed");
  EXPECT_EQ(done["total_steps"], 3);  // the 3 conversations not held out, one epoch, batch 1
}

}  // namespace
}  // namespace kiln
