// config.checkpoint_interval over HTTP (train/train_checkpoints.h): an SFT job of 6 steps with
// checkpoint_interval 2 publishes step-2, step-4 and step-6 under
// <adapter_dir>/<output_name>.checkpoints/, lists them in its status, leaves no staging directory;
// each is a PEFT-layout adapter with a receipt naming its step. Independent references: the last
// checkpoint holds the same factors as the job's final adapter (same bytes of
// adapter_model.safetensors), and every checkpoint is the final adapter of a job that stops at
// that step (the same seed and data with epochs cut short give the same optimizer steps).
// training.checkpoint_keep: only the last N checkpoints stay, on disk and in the status. A job
// whose publication fails (a full disk, through the test hook) keeps its adapter and says where.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "core/atomic_publish.h"
#include "server/serving_stack.h"
#include "tiny_chat_dir.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::string dir = (fs::temp_directory_path() / ("kiln-train-ckpt-" + std::to_string(::getpid()))).string();
  std::unique_ptr<ServingStack> stack;
  KilnConfig config;
  explicit Fixture(int64_t checkpoint_keep = 3) {
    fs::remove_all(dir);
    config = testing::tiny_chat_server_config(dir);
    config.memory.kv_blocks = 32;
    config.training.checkpoint_keep = checkpoint_keep;
    auto s = ServingStack::start(config);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    if (s.ok()) stack = std::move(*s);
  }
  ~Fixture() {
    set_publish_fault_hook(nullptr);
    stack.reset();
    fs::remove_all(dir);
  }
  json post(const std::string& path, const json& body) const {
    httplib::Client cli("127.0.0.1", stack->port());
    auto r = cli.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
    return r && r->status == 200 ? json::parse(r->body) : json();
  }
  json run_job(const json& body) const {
    const json job = post("/v1/train/sft", body);
    httplib::Client cli("127.0.0.1", stack->port());
    json s;
    for (int i = 0; i < 2400; ++i) {
      auto r = cli.Get(("/v1/train/status/" + job.value("job_id", std::string())).c_str());
      if (r && r->status == 200) s = json::parse(r->body);
      const std::string st = s.value("state", "");
      if (st == "completed" || st == "failed" || st == "cancelled") return s;
      std::this_thread::sleep_for(50ms);
    }
    ADD_FAILURE() << "the job did not end: " << s.dump();
    return s;
  }
};

// A constant learning rate: under a decaying schedule a step's rate depends on how many steps the
// run has, and a checkpoint could not equal the end of a shorter run.
json sft_body(const std::string& name, int epochs, int checkpoint_interval) {
  json examples = json::array();
  for (const char* answer : {"alpha beta", "gamma delta"})
    examples.push_back({{"messages", {{{"role", "user"}, {"content", "Say it"}}, {{"role", "assistant"}, {"content", answer}}}}});
  return {{"examples", examples},
          {"config", {{"lora_rank", 2}, {"learning_rate", 0.01}, {"lr_schedule", "constant"}, {"epochs", epochs}, {"seed", 9},
                      {"optimizer", {{"kind", "adam_w"}}}, {"output_name", name}, {"replace", true}, {"auto_load", false},
                      {"checkpoint_interval", checkpoint_interval}}}};
}

TEST(TrainCheckpoints, EveryNStepsAnAdapterIsPublishedListedAndEqualToAShorterRun) {
  Fixture f;
  ASSERT_TRUE(f.stack);
  const std::string adapters = f.config.model.adapter_dir;
  const json done = f.run_job(sft_body("ck", 3, 2));  // 2 examples x 3 epochs, batch 1: 6 steps
  ASSERT_EQ(done["state"], "completed") << done.dump();
  ASSERT_EQ(done["total_steps"], 6);
  const std::string ckdir = adapters + "/ck.checkpoints";
  ASSERT_EQ(done["checkpoints"].size(), 3u) << done.dump();
  for (int i = 0; i < 3; ++i) {
    const int step = 2 * (i + 1);
    const std::string path = ckdir + "/step-" + std::to_string(step);
    EXPECT_EQ(done["checkpoints"][i]["step"], step);
    EXPECT_EQ(done["checkpoints"][i]["path"], path);
    for (const char* file : {"adapter_config.json", "adapter_model.safetensors", "train_receipt.json"})
      EXPECT_TRUE(fs::exists(path + "/" + file)) << path << "/" << file;
    const json receipt = json::parse(file_bytes(path + "/train_receipt.json"));
    EXPECT_EQ(receipt["kind"], "kiln.train_checkpoint");
    EXPECT_EQ(receipt["step"], step);
    EXPECT_EQ(receipt["adapter_name"], "ck");
  }
  for (const auto& e : fs::directory_iterator(ckdir))
    EXPECT_EQ(e.path().filename().string().rfind("step-", 0), 0u) << "left behind: " << e.path();
  // The last checkpoint is the final adapter.
  const std::string final_weights = file_bytes(adapters + "/ck/adapter_model.safetensors");
  EXPECT_EQ(file_bytes(ckdir + "/step-6/adapter_model.safetensors"), final_weights);
  // Step 2 is what a job of one epoch (2 steps, the same seed and data) ends with, and not step 6.
  const json short_run = f.run_job(sft_body("ck2", 1, 0));
  ASSERT_EQ(short_run["state"], "completed") << short_run.dump();
  EXPECT_TRUE(short_run["checkpoints"].empty());
  EXPECT_FALSE(fs::exists(adapters + "/ck2.checkpoints"));
  const std::string step2 = file_bytes(ckdir + "/step-2/adapter_model.safetensors");
  EXPECT_EQ(step2, file_bytes(adapters + "/ck2/adapter_model.safetensors"));
  EXPECT_NE(step2, final_weights);
  // A re-run of the name replaces the folder: a 1-step-interval job of 2 steps leaves step-1, step-2.
  const json again = f.run_job(sft_body("ck", 1, 1));
  ASSERT_EQ(again["state"], "completed") << again.dump();
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ckdir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-1", "step-2"}));
}

TEST(TrainCheckpoints, OnlyTheLastCheckpointKeepStayOnDiskAndInTheStatus) {
  Fixture f(2);
  ASSERT_TRUE(f.stack);
  const json done = f.run_job(sft_body("kept", 3, 1));  // 6 steps, a checkpoint after each
  ASSERT_EQ(done["state"], "completed") << done.dump();
  const std::string ckdir = f.config.model.adapter_dir + "/kept.checkpoints";
  ASSERT_EQ(done["checkpoints"].size(), 2u) << done.dump();
  EXPECT_EQ(done["checkpoints"][0]["step"], 5);
  EXPECT_EQ(done["checkpoints"][1]["step"], 6);
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(ckdir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"step-5", "step-6"}));
}

TEST(TrainJobs, AJobWhosePublicationFailsKeepsItsAdapterAndItsErrorSaysWhere) {
  Fixture f;
  ASSERT_TRUE(f.stack);
  const std::string adapters = f.config.model.adapter_dir;
  // The disk fills when the job's adapter folder is synced.
  set_publish_fault_hook([](PublishStep step, const std::string& target) -> Status {
    const bool hit = step == PublishStep::kSyncFiles && fs::path(target).filename().string().rfind(".staging-full-", 0) == 0;
    return hit ? io_error("No space left on device") : Status();
  });
  const json done = f.run_job(sft_body("full", 1, 0));
  set_publish_fault_hook(nullptr);
  ASSERT_EQ(done["state"], "failed") << done.dump();
  const std::string error = done["error"].get<std::string>();
  EXPECT_NE(error.find("No space left on device"), std::string::npos) << error;
  const std::string prefix = "kept in " + adapters + "/.failed-full-";
  const size_t at = error.find(prefix);
  ASSERT_NE(at, std::string::npos) << error;
  const std::string kept = error.substr(at + 8, prefix.size() - 8 + 16);  // the folder and its 16 hex digits
  EXPECT_TRUE(fs::exists(kept + "/adapter_model.safetensors")) << kept;
  EXPECT_FALSE(fs::exists(adapters + "/full"));
  // The retry: the kept folder loads as an adapter of the served model.
  const json loaded = f.post("/v1/adapters/load", {{"name", "full"}, {"path", kept}});
  EXPECT_EQ(loaded["path"], kept);
}

}  // namespace
}  // namespace kiln
