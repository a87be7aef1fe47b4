// One thread owns the device (docs/ARCHITECTURE.md, "The engine"): a CPU ServingStack on a
// backend that notes the thread of every storage, linear and optimizer call, while clients decode
// without pause and, over HTTP, adapters are loaded (one made the default), merged (a loaded and
// an on-disk source), uploaded, unloaded, and a training job continuing a loaded adapter writes a
// checkpoint, publishes, runs its post-training eval and auto-loads. Asserted: each operation
// succeeded, and every device call after the stack started came from one thread, the one that ran
// the forwards: the engine's. Loads that uploaded from an HTTP thread, or a job that saved from its
// own, would add threads.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <thread>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "archive_builder.h"
#include "forwarding_backend.h"
#include "model/init.h"
#include "model/lora_adapter.h"
#include "server/serving_stack.h"
#include "tiny_chat_dir.h"
#include "tokenizer/qwen3_fixture.h"

namespace kiln {
namespace {

std::string file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

namespace fs = std::filesystem;
using json = nlohmann::json;
using namespace std::chrono_literals;

// The threads device calls came from, once armed: calls and the first call's name per thread.
class ThreadLog {
 public:
  void arm(bool on) { armed_.store(on); }
  void note(const char* what) {
    if (!armed_.load()) return;
    std::lock_guard<std::mutex> lock(mu_);
    Entry& e = by_thread_[std::this_thread::get_id()];
    if (e.calls++ == 0) e.first = what;
  }
  struct Entry {
    int64_t calls = 0;
    std::string first;
  };
  std::map<std::thread::id, Entry> by_thread() const {
    std::lock_guard<std::mutex> lock(mu_);
    return by_thread_;
  }

 private:
  std::atomic<bool> armed_{false};
  mutable std::mutex mu_;
  std::map<std::thread::id, Entry> by_thread_;
};

class NotedStorage final : public StorageFacet {
 public:
  NotedStorage(StorageFacet& inner, ThreadLog& log) : inner_(inner), log_(log) {}
  Result<Tensor> allocate(Shape shape, DType dtype) override {
    log_.note("storage.allocate");
    return inner_.allocate(shape, dtype);
  }
  Result<Tensor> empty(Shape shape, DType dtype) override {
    log_.note("storage.empty");
    return inner_.empty(shape, dtype);
  }
  Result<Tensor> upload(const Tensor& host) override {
    log_.note("storage.upload");
    return inner_.upload(host);
  }
  Result<std::shared_ptr<Storage>> weight_arena(size_t bytes) override {
    log_.note("storage.weight_arena");
    return inner_.weight_arena(bytes);
  }
  Status copy_from_host(const Tensor& src, const Tensor& dst) override {
    log_.note("storage.copy_from_host");
    return inner_.copy_from_host(src, dst);
  }
  Status copy_to_host(const Tensor& src, const Tensor& dst) override {
    log_.note("storage.copy_to_host");
    return inner_.copy_to_host(src, dst);
  }
  Status zero(const Tensor& dst) override {
    log_.note("storage.zero");
    return inner_.zero(dst);
  }
  Status copy(const Tensor& src, const Tensor& dst) override {
    log_.note("storage.copy");
    return inner_.copy(src, dst);
  }
  Status synchronize() override {
    log_.note("storage.synchronize");
    return inner_.synchronize();
  }

 private:
  StorageFacet& inner_;
  ThreadLog& log_;
};

class NotedLinear final : public LinearFacet {
 public:
  NotedLinear(LinearFacet& inner, ThreadLog& log, std::atomic<int64_t>& forwards)
      : inner_(inner), log_(log), forwards_(forwards) {}
  Support supports(const MatmulRequest& r) const override { return inner_.supports(r); }
  Status matmul(const MatmulArgs& a) override {
    note();
    return inner_.matmul(a);
  }
  Status matmul_group(const MatmulGroupArgs& a) override {
    note();
    return inner_.matmul_group(a);
  }
  Status lora_delta(const LoraDeltaArgs& a) override {
    note();
    return inner_.lora_delta(a);
  }

 private:
  void note() {
    log_.note("linear");
    ++forwards_;
  }
  LinearFacet& inner_;
  ThreadLog& log_;
  std::atomic<int64_t>& forwards_;
};

class NotedOptimizer final : public OptimizerFacet {
 public:
  NotedOptimizer(OptimizerFacet& inner, ThreadLog& log) : inner_(inner), log_(log) {}
  Support supports(const OptimizerRequest& r) const override { return inner_.supports(r); }
  Status step(const OptimizerStepArgs& a) override {
    log_.note("optimizer.step");
    return inner_.step(a);
  }
  Status step_many(std::span<const OptimizerStepArgs> args) override {
    log_.note("optimizer.step_many");
    return inner_.step_many(args);
  }
  Result<double> sum_squares(std::span<const Tensor> tensors) override {
    log_.note("optimizer.sum_squares");
    return inner_.sum_squares(tensors);
  }

 private:
  OptimizerFacet& inner_;
  ThreadLog& log_;
};

// The CPU backend with its storage, linear and optimizer calls noted in `log`; linear calls (every
// forward's projections) also counted in `forwards`.
class NotedCpu final : public testing::ForwardingBackend {
 public:
  NotedCpu(ThreadLog& log, std::atomic<int64_t>& forwards)
      : ForwardingBackend(std::move(create_backend("cpu").value())),
        storage_(inner().storage(), log),
        linear_(inner().linear(), log, forwards),
        optimizer_(inner().optimizer(), log) {}
  StorageFacet& storage() override { return storage_; }
  LinearFacet& linear() override { return linear_; }
  OptimizerFacet& optimizer() override { return optimizer_; }

 private:
  NotedStorage storage_;
  NotedLinear linear_;
  NotedOptimizer optimizer_;
};

struct Dir {
  std::string path = (fs::temp_directory_path() / ("kiln-device-owner-" + std::to_string(::getpid()))).string();
  ~Dir() { fs::remove_all(path); }
};

json call(int port, const std::string& path, const std::string& body, const std::string& type = "application/json") {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  auto r = path.rfind("GET ", 0) == 0 ? cli.Get(path.substr(4).c_str()) : cli.Post(path.c_str(), body, type);
  EXPECT_TRUE(r && r->status == 200) << path << ": " << (r ? r->body : "no response");
  return r && r->status == 200 ? json::parse(r->body) : json();
}
json post(int port, const std::string& path, const json& body) { return call(port, path, body.dump()); }

TEST(DeviceOwner, EveryDeviceCallComesFromTheEngineThreadWhileAdaptersChurnUnderLoad) {
  Dir dir;
  KilnConfig c = testing::tiny_chat_server_config(dir.path);
  c.server.max_decode_batch = 8;
  c.memory.kv_blocks = 64;
  testing::write_random_adapter(c.model.adapter_dir + "/a", 4, 5);
  testing::write_random_adapter(c.model.adapter_dir + "/b", 2, 6);
  testing::write_random_adapter(c.model.adapter_dir + "/disk", 2, 7);
  ThreadLog log;
  std::atomic<int64_t> forwards{0};
  auto started = ServingStack::start(c, nullptr, nullptr, std::make_unique<NotedCpu>(log, forwards));
  ASSERT_TRUE(started.ok()) << started.status().to_string();
  std::unique_ptr<ServingStack> stack = std::move(*started);
  const int port = stack->port();
  log.arm(true);  // the model's load and the engine's setup ran on this thread, before serving

  std::atomic<bool> stop{false};
  std::atomic<int> served{0}, failed{0};
  std::vector<std::thread> clients;
  for (int k = 0; k < 4; ++k)
    clients.emplace_back([&, k] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(60, 0);
      for (int i = 0; !stop.load(); ++i) {
        const json body = {{"prompt", "Hello number " + std::to_string(k * 100 + i)}, {"max_tokens", 6},
                           {"temperature", 0}};
        auto r = cli.Post("/v1/completions", body.dump(), "application/json");
        (r && r->status == 200 ? served : failed)++;
      }
    });
  for (int i = 0; i < 200 && served.load() < 4; ++i) std::this_thread::sleep_for(50ms);

  post(port, "/v1/eval/suites",
       {{"name", "hi"}, {"max_tokens", 4}, {"examples", {{{"messages", {{{"role", "user"}, {"content", "Hi"}}}},
                                                         {"expected", "x"}, {"scorer", "contains"}}}}});
  post(port, "/v1/adapters/load", {{"name", "a"}, {"default", true}});
  const json job = post(port, "/v1/train/sft",
                        {{"examples", {{{"messages", {{{"role", "user"}, {"content", "Hi"}},
                                                      {{"role", "assistant"}, {"content", "Hello there"}}}}}}},
                         {"config", {{"learning_rate", 0.01}, {"epochs", 2}, {"seed", 3}, {"base_adapter", "a"},
                                     {"checkpoint_interval", 1}, {"output_name", "trained"},
                                     {"post_eval", {{"suite", "hi"}}}}}});
  const std::string b_dir = c.model.adapter_dir + "/b";
  const std::string archive = testing::make_tar_gz({{"adapter_config.json", file_bytes(b_dir + "/adapter_config.json")},
                                                   {"adapter_model.safetensors", file_bytes(b_dir + "/adapter_model.safetensors")}});
  for (int round = 0; round < 2; ++round) {
    post(port, "/v1/adapters/load", {{"name", "b"}});
    const json merged = post(port, "/v1/adapters/merge",
                             {{"sources", {{{"name", "a"}, {"weight", 0.5}}, {{"name", "disk"}, {"weight", 1.0}}}},
                              {"method", "concat"}, {"output_name", "ab"}, {"replace", true}, {"load", true}});
    EXPECT_EQ(merged.value("rank", 0), 4 + 2);
    EXPECT_TRUE(call(port, "/v1/adapters/upload?name=up&replace=true&load=true", archive, "application/gzip")
                    .value("loaded", false));
    post(port, "/v1/completions", {{"prompt", "Hello"}, {"max_tokens", 4}, {"adapter", "ab"}});
    for (const char* name : {"ab", "up", "b"}) post(port, "/v1/adapters/unload", {{"name", name}});
  }
  json status;
  for (int i = 0; i < 3000; ++i) {
    status = call(port, "GET /v1/train/status/" + job.value("job_id", std::string()), "");
    const std::string st = status.value("state", "");
    if (st == "completed" || st == "failed" || st == "cancelled") break;
    std::this_thread::sleep_for(50ms);
  }
  post(port, "/v1/adapters/unload", {{"name", "a"}});
  stop.store(true);
  for (auto& t : clients) t.join();
  log.arm(false);

  ASSERT_EQ(status.value("state", ""), "completed") << status.dump();
  EXPECT_EQ(status["checkpoints"].size(), 2u) << status.dump();
  EXPECT_EQ(status["post_eval"].value("suite", ""), "hi") << status.dump();
  EXPECT_EQ(status["adapter_revision"], 1) << status.dump();  // auto-loaded
  EXPECT_EQ(failed.load(), 0);
  EXPECT_GE(served.load(), 4);
  EXPECT_GT(forwards.load(), 0);
  const auto threads = log.by_thread();
  std::string seen;
  for (const auto& [id, e] : threads) seen += "\n  " + std::to_string(e.calls) + " calls, the first " + e.first;
  ASSERT_EQ(threads.size(), 1u) << "device calls came from " << threads.size() << " threads:" << seen;
  EXPECT_GT(threads.begin()->second.calls, forwards.load()) << "storage and optimizer calls, not only forwards";
  std::printf("device owner: %d completions, %lld device calls on one thread (%lld linear)\n", served.load(),
              static_cast<long long>(threads.begin()->second.calls), static_cast<long long>(forwards.load()));
}

}  // namespace
}  // namespace kiln
