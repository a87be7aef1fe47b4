// Adapters loaded and unloaded while 16 clients decode on the CUDA backend: the engine under its
// EngineActor, the registry's uploads run through the actor between cycles (as ServingStack wires
// them), so no upload is on the stream while a decode step is being recorded. Clients repeat one
// greedy request each through the base model, a held adapter, the churned one, or both stacked;
// the churned adapter's unloads drop the recordings that held it, and its loads bring new
// compositions to record. Facts held: graph replays continue during the churn (the engine's replay
// count grows between the churn's start and end), no recording fails, no request fails, and every
// request's tokens equal those the eager engine (decode_replay off) gives its prompt and stack.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <thread>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "engine/adapter_registry.h"
#include "engine/engine.h"
#include "engine/engine_actor.h"
#include "model/qwen35.h"
#include "model/random_adapter.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int kClients = 16, kRounds = 40;
constexpr int64_t kTokens = 24;

enum class Stack { kBase, kHeld, kChurned, kBoth };
Stack stack_of(int client) { return static_cast<Stack>(client % 4); }

// Client `k`'s request: its own prompt, greedy, through its stack.
RequestSpec request(int k, int64_t vocab) {
  RequestSpec r;
  for (int64_t t = 0; t < 9 + 3 * k; ++t) r.prompt.push_back(static_cast<int32_t>((t * 31 + k * 17 + 3) % vocab));
  r.max_tokens = kTokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.f;
  r.sampling.logprobs = false;
  switch (stack_of(k)) {
    case Stack::kBase: r.base_model = true; break;
    case Stack::kHeld: r.adapter = "held"; break;
    case Stack::kChurned: r.adapter = "churned"; break;
    case Stack::kBoth: r.adapters = {{"held", 1.f}, {"churned", 0.5f}}; break;
  }
  return r;
}

EngineConfig engine_config(AdapterRegistry* registry, bool replay) {
  EngineConfig ec;
  ec.kv_blocks = 64;
  ec.scheduler.max_running = kClients;
  ec.prefix_cache.enabled = false;
  ec.adapters = registry;
  ec.decode_replay = replay;
  return ec;
}

TEST(CudaAdapterChurn, SixteenClientsDecodeReplayedAndExactWhileAnAdapterLoadsAndUnloads) {
  KILN_CUDA_OR_SKIP(be);
  ASSERT_TRUE(be->replay().available()) << "KILN_CUDA_GRAPHS=0 or KILN_CUDA_PROFILE set";
  auto loaded = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  Qwen35Model& model = **loaded;
  const int64_t V = model.config().vocab_size;
  const std::string held_dir = std::string(KILN_FIXTURES_DIR) + "/lora_reference/gqa_untied";
  const std::string churned_dir = testing::temp_dir("cuda-adapter-churn");
  ASSERT_TRUE(testing::random_adapter(model.config(), be->storage(), 9).save(churned_dir, be->storage()).ok());

  // The eager engine's tokens for every client's request, all in one batch.
  std::vector<std::vector<int32_t>> want(kClients);
  {
    AdapterRegistry registry(model.config(), be->storage());
    ASSERT_TRUE(registry.load("held", held_dir).ok());
    ASSERT_TRUE(registry.load("churned", churned_dir).ok());
    auto eager = Engine::create(model, engine_config(&registry, false));
    ASSERT_TRUE(eager.ok()) << eager.status().to_string();
    std::vector<Submission> subs;
    for (int k = 0; k < kClients; ++k) subs.push_back((*eager)->submit(request(k, V)).value());
    while ((*eager)->has_work()) ASSERT_TRUE((*eager)->step().ok());
    for (int k = 0; k < kClients; ++k)
      while (auto e = subs[k].channel->try_pop())
        if (e->token >= 0) want[k].push_back(e->token);
    for (int k = 0; k < kClients; ++k) ASSERT_EQ(want[k].size(), static_cast<size_t>(kTokens)) << "client " << k;
  }

  // The serving side: uploads through the actor, whose engine replays.
  std::unique_ptr<EngineActor> actor;
  AdapterRegistry registry(model.config(), be->storage(),
                           [&actor](const std::function<Status()>& work) { return actor->run_between_cycles(work); });
  auto engine = Engine::create(model, engine_config(&registry, true));
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  actor = std::make_unique<EngineActor>(std::move(*engine));
  ASSERT_TRUE(registry.load("held", held_dir).ok());
  ASSERT_TRUE(registry.load("churned", churned_dir).ok());

  std::atomic<bool> stop{false};
  std::atomic<int> mismatches{0}, errors{0}, churn_done{0};
  std::atomic<bool> churning{false};
  std::vector<std::atomic<int>> done(kClients);
  std::vector<std::thread> clients;
  for (int k = 0; k < kClients; ++k)
    clients.emplace_back([&, k] {
      while (!stop.load()) {
        auto sub = actor->submit(request(k, V));
        if (!sub.ok()) {
          // The churned adapter is between an unload and the next load: ask again.
          if (sub.status().code() != ErrorCode::kNotFound) ++errors;
          std::this_thread::sleep_for(1ms);
          continue;
        }
        std::vector<int32_t> got;
        bool finished = false;
        while (!finished) {
          auto e = sub->channel->pop(1000ms);
          if (!e) continue;
          if (e->finish == FinishReason::kError) ++errors;
          if (e->token >= 0) got.push_back(e->token);
          finished = e->finish != FinishReason::kNone;
        }
        if (got != want[k]) ++mismatches;
        ++done[k];
        if (churning.load() && stack_of(k) != Stack::kBase && stack_of(k) != Stack::kHeld) ++churn_done;
      }
    });
  auto everyone_done = [&](int n) {
    for (int k = 0; k < kClients; ++k)
      if (done[k].load() < n) return false;
    return true;
  };
  for (int i = 0; i < 6000 && !everyone_done(2); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(everyone_done(2)) << "the clients did not get going";

  const EngineStats before = actor->stats();
  churning.store(true);
  for (int round = 0; round < kRounds; ++round) {
    ASSERT_TRUE(registry.unload("churned").ok());
    std::this_thread::sleep_for(5ms);
    auto l = registry.load("churned", churned_dir);
    ASSERT_TRUE(l.ok()) << l.status().to_string();
    std::this_thread::sleep_for(20ms);
  }
  const EngineStats during = actor->stats();
  churning.store(false);
  stop.store(true);
  for (auto& t : clients) t.join();
  const EngineStats after = actor->stats();
  actor.reset();

  int total = 0;
  for (int k = 0; k < kClients; ++k) total += done[k].load();
  std::printf("adapter churn: %d requests, %d of the churned stacks during %d reloads; decode replays %lld -> %lld, "
              "recordings %lld, invalidated %lld, record failures %lld\n",
              total, churn_done.load(), kRounds, static_cast<long long>(before.decode_replays),
              static_cast<long long>(during.decode_replays), static_cast<long long>(after.decode_recordings),
              static_cast<long long>(after.decode_recordings_invalidated),
              static_cast<long long>(after.decode_record_failures));
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(mismatches.load(), 0) << "requests whose tokens differ from the eager engine's";
  EXPECT_GT(during.decode_replays, before.decode_replays) << "replays stopped during the churn";
  EXPECT_EQ(after.decode_record_failures, 0);
  EXPECT_GT(after.decode_recordings_invalidated, 0) << "the churn dropped no recording: it tested nothing";
  EXPECT_GT(churn_done.load(), 0) << "no request through the churned adapter finished during the churn";
  auto stats = cuda_backend_stats(*be);
  ASSERT_TRUE(stats.ok());
  EXPECT_GE(stats->graph_replays, static_cast<uint64_t>(after.decode_replays));
}

}  // namespace
}  // namespace kiln
