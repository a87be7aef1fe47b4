// End to end on the CUDA backend: the serving engine at concurrency 8
// (four requests, then four more arriving while the first decode), each a prefill and 256 decode
// steps, rows of every sampling kind the engine serves from the device (greedy ids only, greedy
// with logprobs, temperature with top-p). Facts held: every request streams its 256 tokens without
// an error, the host-fallback counters stay at zero, and once every prompt is in, a decode step is
// one graph replay plus at most kMaxLaunchesPerSteadyStep kernel launches (argmax, sample),
// recordings aside (the bound per decode token is that over 8 rows), with no cudaMalloc (pool
// misses) and less than a logits row copied to the host. The
// figures over the whole run (prefills and recordings included) are printed and recorded.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/fallback.h"
#include "engine/engine.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

constexpr int64_t kRows = 8, kDecodeSteps = 256;
constexpr uint64_t kMaxLaunchesPerSteadyStep = 4;

RequestSpec request(int64_t i, int64_t prompt_len, int32_t vocab) {
  RequestSpec r;
  for (int64_t t = 0; t < prompt_len; ++t) r.prompt.push_back(static_cast<int32_t>((t * 31 + i * 17 + 3) % vocab));
  r.max_tokens = kDecodeSteps + 1;  // the prefill's token, then 256 decode steps
  r.ignore_eos = true;
  r.seed = 100 + static_cast<uint64_t>(i);
  r.sampling.temperature = 0.f;
  r.sampling.logprobs = false;
  if (i == 5) r.sampling.logprobs = true;  // greedy with its logprob
  if (i >= 6) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_p = i == 6 ? 1.f : 0.9f;
  }
  return r;
}

TEST(CudaServing, EightRowsFor256StepsWithoutFallbackAndBoundedLaunches) {
  KILN_CUDA_OR_SKIP(be);
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int32_t V = static_cast<int32_t>((*model)->config().vocab_size);
  EngineConfig ec;
  ec.kv_blocks = 64;
  ec.scheduler.max_running = kRows;
  ec.scheduler.max_batch_tokens = 256;  // the 300-token prompt takes two cycles
  ec.prefix_cache.enabled = false;
  auto engine = Engine::create(**model, ec);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  FallbackCounters::global().reset();
  const auto stats0 = cuda_backend_stats(*be);
  ASSERT_TRUE(stats0.ok()) << stats0.status().to_string();

  std::vector<Submission> subs;
  std::vector<int64_t> tokens(kRows, 0);
  std::vector<bool> finished(kRows, false);
  // Each cycle the clients take what was streamed (a full channel would pause its row).
  const auto drain = [&] {
    for (size_t i = 0; i < subs.size(); ++i)
      while (auto e = subs[i].channel->try_pop()) {
        EXPECT_NE(e->finish, FinishReason::kError) << "request " << i << ": " << e->error;
        if (e->token >= 0) {
          EXPECT_LT(e->token, V);
          ++tokens[i];
        }
        finished[i] = finished[i] || e->finish != FinishReason::kNone;
      }
  };
  const auto submit = [&](int64_t i) {
    auto sub = (*engine)->submit(request(i, i == 2 ? 300 : 5 + 9 * i, V));
    ASSERT_TRUE(sub.ok()) << sub.status().to_string();
    subs.push_back(*sub);
  };
  for (int64_t i = 0; i < kRows / 2; ++i) submit(i);
  int64_t cycles = 0, steady_steps = 0;
  while ((*engine)->has_work()) {
    if (cycles == 3)
      for (int64_t i = kRows / 2; i < kRows; ++i) submit(i);
    const auto before = cuda_backend_stats(*be);
    const EngineStats es_before = (*engine)->stats();
    auto r = (*engine)->step();
    ASSERT_TRUE(r.ok()) << "cycle " << cycles << ": " << r.status().to_string();
    ++cycles;
    drain();
    const auto after = cuda_backend_stats(*be);
    ASSERT_TRUE(before.ok() && after.ok());
    const EngineStats es = (*engine)->stats();
    const bool steady = r->prefill_rows == 0 && r->decode_rows == kRows && es.decode_recordings == es_before.decode_recordings;
    if (!steady) continue;
    ++steady_steps;
    EXPECT_EQ(after->graph_replays - before->graph_replays, 1u) << "cycle " << cycles;
    EXPECT_LE(after->launches - before->launches, kMaxLaunchesPerSteadyStep) << "cycle " << cycles;
    // Nothing allocated by cudaMalloc on the hot path (the pool serves every temporary), and ids,
    // logprobs only to the host: less than one logits row for the 8 rows.
    EXPECT_EQ(after->pool_misses - before->pool_misses, 0u) << "cycle " << cycles;
    EXPECT_LT(after->bytes_to_host - before->bytes_to_host, static_cast<uint64_t>(V) * 4) << "cycle " << cycles;
  }
  const auto stats1 = cuda_backend_stats(*be);
  ASSERT_TRUE(stats1.ok());

  drain();
  for (int64_t i = 0; i < kRows; ++i) {
    EXPECT_EQ(tokens[i], kDecodeSteps + 1) << "request " << i;
    EXPECT_TRUE(finished[i]) << "request " << i;
  }
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
  // The four late requests join while the first four decode, so the 8-row steps are most of the
  // run: every one of them after the first 8-row recording is steady.
  EXPECT_GE(steady_steps, kDecodeSteps - 16);

  const uint64_t launches = stats1->launches - stats0->launches, replays = stats1->graph_replays - stats0->graph_replays;
  const double decode_tokens = static_cast<double>(kRows * kDecodeSteps);
  std::printf("%lld cycles, %lld steady 8-row steps; whole run: %llu launches, %llu graph replays, %llu recordings; "
              "per decode token %.2f launches + %.3f replays\n",
              static_cast<long long>(cycles), static_cast<long long>(steady_steps),
              static_cast<unsigned long long>(launches), static_cast<unsigned long long>(replays),
              static_cast<unsigned long long>(stats1->graph_recordings - stats0->graph_recordings), launches / decode_tokens,
              replays / decode_tokens);
  RecordProperty("launches_per_decode_token_whole_run", std::to_string(launches / decode_tokens));
  RecordProperty("steady_step_launch_bound", static_cast<int>(kMaxLaunchesPerSteadyStep));
}

}  // namespace
}  // namespace kiln
