// What the HTTP training proofs share (train_proof_http_test.cc, grpo_proof_http_test.cc): a CPU
// ServingStack on a random tiny-chat checkpoint widened to hidden 256, POST and the wait for a
// training job. Why 256: only the LoRA factors train, so the final norm and the random LM head fix
// how sharp a distribution over the 151,936-token vocabulary the last hidden state can express: at
// tiny-chat's width of 64 the best direction reaches a logit about 8 above noise of unit spread, a
// loss floor near ln(151936) + 0.5 - 8 = 4.4 from a start near 12.9 (measured: 12.94 -> 4.42, flat
// after that); at 256 the reachable logit is about 16 and the floor is below zero.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "server/serving_stack.h"
#include "tiny_chat_dir.h"

namespace kiln::testing {

class ProofServer {
 public:
  // Writes the checkpoint under a fresh temporary directory named after `name` and starts the stack;
  // `ok()` says whether it runs (the failure is already reported).
  // `tweak`, when given, changes the configuration, or the model folder it names, before the stack
  // starts.
  explicit ProofServer(const std::string& name, const std::function<void(KilnConfig&)>& tweak = {}) {
    namespace fs = std::filesystem;
    dir_ = (fs::temp_directory_path() / ("kiln-" + name + "-" + std::to_string(::getpid()))).string();
    fs::remove_all(dir_);
    ModelConfig mc = preset_config("tiny-chat").value();
    mc.hidden_size = 256;
    KilnConfig c = tiny_chat_server_config(dir_, mc);
    if (::testing::Test::HasFailure()) return;
    c.memory.kv_blocks = 64;
    if (tweak) tweak(c);
    auto started = ServingStack::start(c);
    if (!started.ok()) {
      ADD_FAILURE() << started.status().to_string();
      return;
    }
    stack_ = std::move(*started);
  }
  ~ProofServer() {
    stack_.reset();
    std::filesystem::remove_all(dir_);
  }
  bool ok() const { return stack_ != nullptr; }

  // POST `body`; the parsed answer, or null (with a failure) unless it is a 200.
  int port() const { return stack_->port(); }

  nlohmann::json post(const std::string& path, const nlohmann::json& body) const {
    httplib::Client cli("127.0.0.1", stack_->port());
    cli.set_read_timeout(120, 0);
    auto r = cli.Post(path.c_str(), body.dump(), "application/json");
    EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
    return r && r->status == 200 ? nlohmann::json::parse(r->body) : nlohmann::json();
  }

  // POST `body`; the status (0: no answer) and the parsed body, whatever the status.
  std::pair<int, nlohmann::json> post_any(const std::string& path, const nlohmann::json& body) const {
    httplib::Client cli("127.0.0.1", stack_->port());
    cli.set_read_timeout(120, 0);
    auto r = cli.Post(path.c_str(), body.dump(), "application/json");
    if (!r) return {0, nlohmann::json()};
    return {r->status, nlohmann::json::parse(r->body, nullptr, false)};
  }

  // Polls the job's status until it has ended; the last status seen. The bound is far above any
  // job's time on a loaded 2-core machine (a job that hangs still fails the test): speed is for
  // benchmarks, not for these assertions.
  nlohmann::json wait_job(const nlohmann::json& job) const {
    httplib::Client cli("127.0.0.1", stack_->port());
    nlohmann::json s;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(20);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = cli.Get(("/v1/train/status/" + job.value("job_id", std::string())).c_str());
      if (r && r->status == 200) s = nlohmann::json::parse(r->body);
      const std::string st = s.value("state", "");
      if (st == "completed" || st == "failed" || st == "cancelled") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return s;
  }

 private:
  std::string dir_;
  std::unique_ptr<ServingStack> stack_;
};

}  // namespace kiln::testing
