// Sampling on the device through the Engine (row_sampling.h): greedy rows take their token from one
// batched argmax on the device and copy only ids; the tokens must equal those of the old path
// (every row's logits copied to the host and sampled there) and of the CPU backend's engine, on the
// committed fixtures. Rows that need the distribution in the same batch (temperature, penalties,
// logprobs, top_logprobs) are the device `sample`'s: the host path's tokens and alternatives, their
// logprobs to 1e-5 (double math in another summation order), and no logits row crosses to the host.
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/rotating_constraint.h"
#include "engine/engine.h"
#include "engine/row_sampling.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

std::string fixture_dir(const char* name) { return std::string(KILN_FIXTURES_DIR) + "/reference/" + name; }

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top;
};

// Runs each group of `groups` to completion in turn on one engine over `be` (a group submitted
// before its first cycle); the outputs in submission order, and the engine's stats at the end.
std::vector<Output> run_groups(Backend& be, const char* config, const std::vector<std::vector<RequestSpec>>& groups,
                               bool device_sampling, bool prefix_cache, EngineStats* stats = nullptr) {
  auto model = Qwen35Model::load(fixture_dir(config), be);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return {};
  EngineConfig ec;
  ec.scheduler.max_running = 8;
  ec.scheduler.max_batch_tokens = 1024;
  ec.kv_blocks = 32;
  ec.prefix_cache.enabled = prefix_cache;
  ec.device_sampling = device_sampling;
  auto engine = Engine::create(**model, ec);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return {};
  std::vector<Output> out;
  for (const auto& specs : groups) {
    std::vector<Submission> subs;
    for (const RequestSpec& s : specs) {
      auto sub = (*engine)->submit(s);
      EXPECT_TRUE(sub.ok()) << sub.status().to_string();
      if (!sub.ok()) return {};
      subs.push_back(*sub);
    }
    while ((*engine)->has_work()) {
      auto r = (*engine)->step();
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (!r.ok()) return {};
    }
    for (Submission& sub : subs) {
      Output& o = out.emplace_back();
      while (auto e = sub.channel->try_pop()) {
        EXPECT_NE(e->finish, FinishReason::kError) << e->error;
        if (e->token < 0) continue;
        o.tokens.push_back(e->token);
        o.logprobs.push_back(e->logprob);
        o.top.push_back(e->top_logprobs);
      }
    }
  }
  if (stats != nullptr) *stats = (*engine)->stats();
  return out;
}

// Runs `specs` to completion on an engine over `be`, all submitted before the first cycle.
std::vector<Output> run_engine(Backend& be, const char* config, const std::vector<RequestSpec>& specs,
                               bool device_sampling) {
  return run_groups(be, config, {specs}, device_sampling, false);
}

std::vector<int32_t> prompt(int64_t n, int64_t salt, int64_t vocab) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 31 + salt * 17 + 3) % vocab));
  return p;
}

RequestSpec greedy(std::vector<int32_t> p, int64_t max_tokens) {
  RequestSpec r;
  r.prompt = std::move(p);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0.f;
  r.sampling.logprobs = false;
  return r;
}

TEST(CudaEngine, DeviceArgmaxTokensEqualHostPathAndCpu) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  for (const char* name : {"gqa_untied", "tied_dk_ne_dv", "nested_mha"}) {
    SCOPED_TRACE(name);
    const int64_t V = 300;  // every fixture's vocabulary is at least this large
    std::vector<RequestSpec> specs;
    for (int64_t n : {5, 70, 130, 1}) specs.push_back(greedy(prompt(n, n, V), 24));
    ASSERT_TRUE(needs_only_argmax(specs[0].sampling));
    std::vector<Output> dev = run_engine(*be, name, specs, true);
    std::vector<Output> host = run_engine(*be, name, specs, false);
    std::vector<Output> ref = run_engine(**cpu, name, specs, true);
    ASSERT_EQ(dev.size(), specs.size());
    ASSERT_EQ(host.size(), specs.size());
    ASSERT_EQ(ref.size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      EXPECT_EQ(dev[i].tokens.size(), 24u) << "request " << i;
      EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
      EXPECT_EQ(dev[i].tokens, ref[i].tokens) << "request " << i;
    }
  }
}

// `sampled` of `rows` requests need the distribution: seeded temperature sampling with top-k
// (even rows), greedy with logprobs (odd rows), penalties on every third, three alternatives on
// every second; the others take the device argmax. Everything is picked on the device: what comes
// back to the host is ids and logprobs, less than one logits row a step.
void expect_mixed_batch_matches_host(size_t rows, size_t sampled) {
  KILN_CUDA_OR_SKIP(be);
  const int64_t max_tokens = 12;
  std::vector<RequestSpec> specs;
  for (size_t i = 0; i < rows; ++i) {
    RequestSpec r = greedy(prompt(10 + 7 * static_cast<int64_t>(i), static_cast<int64_t>(i), 300), max_tokens);
    if (i < sampled) {
      if (i % 2 == 0) {
        r.sampling.temperature = 0.8f;
        r.sampling.top_k = 20;
        r.seed = 1234 + i;
      }
      if (i % 3 == 1) {
        r.sampling.repetition_penalty = 1.3f;
        r.sampling.presence_penalty = 0.4f;
        r.sampling.frequency_penalty = 0.2f;
      }
      if (i % 2 == 1) r.sampling.top_logprobs = 3;
      r.sampling.logprobs = true;
    }
    specs.push_back(r);
  }
  auto model = Qwen35Model::load(fixture_dir("gqa_untied"), *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const int64_t V = (*model)->config().vocab_size;
  const uint64_t before = cuda_backend_stats(*be)->bytes_to_host;
  std::vector<Output> dev = run_engine(*be, "gqa_untied", specs, true);
  const uint64_t moved = cuda_backend_stats(*be)->bytes_to_host - before;
  std::vector<Output> host = run_engine(*be, "gqa_untied", specs, false);
  ASSERT_EQ(dev.size(), rows);
  ASSERT_EQ(host.size(), rows);
  // A step per token, the first (prefill) included.
  std::printf("%zu rows, %zu sampled: %llu bytes to the host over %lld steps (a logits row is %lld)\n", rows,
              sampled, static_cast<unsigned long long>(moved), static_cast<long long>(max_tokens),
              static_cast<long long>(V * 4));
  EXPECT_LT(moved, static_cast<uint64_t>(max_tokens * V * 4)) << "logits rows crossed to the host";
  for (size_t i = 0; i < rows; ++i) {
    EXPECT_EQ(dev[i].tokens.size(), 12u) << "request " << i;
    EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
    ASSERT_EQ(dev[i].logprobs.size(), host[i].logprobs.size()) << "request " << i;
    for (size_t t = 0; t < dev[i].logprobs.size(); ++t) {
      EXPECT_NEAR(dev[i].logprobs[t], host[i].logprobs[t], 1e-5) << "request " << i << " token " << t;
      ASSERT_EQ(dev[i].top[t].size(), host[i].top[t].size()) << "request " << i << " token " << t;
      for (size_t k = 0; k < host[i].top[t].size(); ++k) {
        EXPECT_EQ(dev[i].top[t][k].token, host[i].top[t][k].token) << "request " << i << " token " << t;
        EXPECT_NEAR(dev[i].top[t][k].logprob, host[i].top[t][k].logprob, 1e-5) << "request " << i << " token " << t;
      }
    }
    if (i < sampled) {
      for (float lp : dev[i].logprobs) EXPECT_LT(lp, 0.f) << "request " << i << " reports its logprobs";
      if (i % 2 == 1) {
        EXPECT_EQ(dev[i].top[0].size(), 3u) << "request " << i;
      }
    } else {
      for (float lp : dev[i].logprobs) EXPECT_EQ(lp, 0.f) << "request " << i << " asked for no logprobs";
    }
  }
}

TEST(CudaEngine, MixedBatchOneSampledRow) { expect_mixed_batch_matches_host(5, 1); }
TEST(CudaEngine, MixedBatchTwoSampledRows) { expect_mixed_batch_matches_host(3, 2); }
// Sampled rows 0..4 of 6 beside an argmax row; temperature rows are not consecutive logits rows.
TEST(CudaEngine, MixedBatchSampledRowsGathered) { expect_mixed_batch_matches_host(6, 5); }

// Structured-output rows (token masks, logit biases, both; greedy, drawn, penalised, with
// alternatives) beside free rows: sampled on the device with their masks sent up, they give the
// host path's tokens, logprobs (1e-5) and alternatives, and no logits row crosses to the host.
TEST(CudaEngine, ConstrainedAndBiasedRowsSampleOnTheDevice) {
  KILN_CUDA_OR_SKIP(be);
  const int64_t max_tokens = 12, V = 300;  // the gqa_untied fixture's vocabulary
  auto make_specs = [&] {
    std::vector<RequestSpec> specs;
    for (int64_t i = 0; i < 6; ++i) {
      RequestSpec r = greedy(prompt(9 + 5 * i, i, V), max_tokens);
      r.sampling.logprobs = i % 2 == 1;
      if (i == 0 || i == 1 || i == 4 || i == 5) {
        r.constraint = std::make_shared<testing::RotatingConstraint>(V);
        r.ignore_eos = false;
      }
      if (i == 1 || i == 4) {
        r.sampling.temperature = 0.8f;
        r.seed = 77 + static_cast<uint64_t>(i);
      }
      if (i == 4) r.sampling.top_logprobs = 2;
      if (i == 5) r.sampling.repetition_penalty = 1.3f;
      if (i == 2 || i == 5) r.logit_bias = {{7, 4.f}, {100, -100.f}, {211, 2.5f}};
      specs.push_back(r);
    }
    return specs;
  };
  auto model = Qwen35Model::load(fixture_dir("gqa_untied"), *be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  ASSERT_EQ((*model)->config().vocab_size, V);
  const uint64_t before = cuda_backend_stats(*be)->bytes_to_host;
  std::vector<Output> dev = run_engine(*be, "gqa_untied", make_specs(), true);
  const uint64_t moved = cuda_backend_stats(*be)->bytes_to_host - before;
  std::vector<Output> host = run_engine(*be, "gqa_untied", make_specs(), false);
  ASSERT_EQ(dev.size(), 6u);
  ASSERT_EQ(host.size(), 6u);
  std::printf("6 rows, 4 constrained, 2 biased: %llu bytes to the host over %lld steps (a logits row is %lld)\n",
              static_cast<unsigned long long>(moved), static_cast<long long>(max_tokens),
              static_cast<long long>(V * 4));
  EXPECT_LT(moved, static_cast<uint64_t>(max_tokens * V * 4)) << "logits rows crossed to the host";
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_FALSE(dev[i].tokens.empty()) << "request " << i;
    EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
    ASSERT_EQ(dev[i].logprobs.size(), host[i].logprobs.size()) << "request " << i;
    for (size_t t = 0; t < dev[i].logprobs.size(); ++t) {
      EXPECT_NEAR(dev[i].logprobs[t], host[i].logprobs[t], 1e-5) << "request " << i << " token " << t;
      ASSERT_EQ(dev[i].top[t].size(), host[i].top[t].size()) << "request " << i << " token " << t;
      for (size_t k = 0; k < host[i].top[t].size(); ++k)
        EXPECT_EQ(dev[i].top[t][k].token, host[i].top[t][k].token) << "request " << i << " token " << t;
    }
    if (i == 2 || i == 5)
      for (int32_t t : dev[i].tokens) EXPECT_NE(t, 100) << "request " << i << ": a -100 bias keeps id 100 out";
  }
}

// A prompt whose blocks the prefix cache holds gives the tokens, logprobs and alternatives of the
// same request computed from scratch: the hit runs only the prompt's last, partial block. Tokens
// are equal; log-probabilities agree to 1e-4, not bit for bit: the hit's prefill has fewer rows,
// so its GEMMs may take another kernel and sum in another order (an H100 run differed by ~1e-5).
TEST(CudaEngine, PrefixCacheHitEqualsMiss) {
  KILN_CUDA_OR_SKIP(be);
  RequestSpec r = greedy(prompt(150, 5, 300), 8);
  r.sampling.logprobs = true;
  r.sampling.top_logprobs = 3;
  EngineStats stats;
  const std::vector<Output> cached = run_groups(*be, "gqa_untied", {{r}, {r}}, true, true, &stats);
  const std::vector<Output> fresh = run_groups(*be, "gqa_untied", {{r}}, true, false);
  ASSERT_EQ(cached.size(), 2u);
  ASSERT_EQ(fresh.size(), 1u);
  EXPECT_EQ(stats.prefix_hits, 1);
  EXPECT_EQ(cached[1].tokens, cached[0].tokens);
  EXPECT_EQ(cached[1].tokens, fresh[0].tokens);
  ASSERT_EQ(cached[1].logprobs.size(), fresh[0].logprobs.size());
  for (size_t t = 0; t < fresh[0].logprobs.size(); ++t)
    EXPECT_NEAR(cached[1].logprobs[t], fresh[0].logprobs[t], 1e-4) << "token " << t;
  ASSERT_EQ(cached[1].top.size(), fresh[0].top.size());
  for (size_t t = 0; t < fresh[0].top.size(); ++t) {
    ASSERT_EQ(cached[1].top[t].size(), fresh[0].top[t].size()) << "token " << t;
    for (size_t j = 0; j < fresh[0].top[t].size(); ++j) {
      EXPECT_EQ(cached[1].top[t][j].token, fresh[0].top[t][j].token) << "token " << t << " alternative " << j;
      EXPECT_NEAR(cached[1].top[t][j].logprob, fresh[0].top[t][j].logprob, 1e-4) << "token " << t << " alternative " << j;
    }
  }
  EXPECT_EQ(fresh[0].tokens.size(), 8u);
}

// Prompt scores of prompt_logprobs 0 rows come from the fused log-probabilities on the device
// (no [tokens, vocab] logits cross to the host); they must equal the host path's (prompt_logprobs
// 1: every position's logits copied and log-softmaxed in double) and the CPU engine's to 1e-4, on
// an untied and a tied LM head, for rows of several lengths in one cycle and a prompt chunked
// over cycles; the generated tokens are the host path's.
TEST(CudaEngine, OwnTokenPromptScoresOnTheDeviceEqualTheHostPath) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu");
  ASSERT_TRUE(cpu.ok()) << cpu.status().to_string();
  struct Scored {
    std::vector<SampledToken> scores;
    std::vector<int32_t> tokens;
  };
  auto run = [](Backend& b, const char* name, std::vector<RequestSpec> specs, int32_t prompt_logprobs, int64_t budget) {
    std::vector<Scored> out(specs.size());
    auto model = Qwen35Model::load(fixture_dir(name), b);
    EXPECT_TRUE(model.ok()) << model.status().to_string();
    if (!model.ok()) return out;
    EngineConfig ec;
    ec.scheduler.max_running = 8;
    ec.scheduler.max_batch_tokens = budget;
    ec.kv_blocks = 32;
    auto engine = Engine::create(**model, ec);
    EXPECT_TRUE(engine.ok()) << engine.status().to_string();
    if (!engine.ok()) return out;
    std::vector<Submission> subs;
    for (RequestSpec& s : specs) {
      s.prompt_logprobs = prompt_logprobs;
      subs.push_back((*engine)->submit(s).value());
    }
    while ((*engine)->has_work()) {
      auto r = (*engine)->step();
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (!r.ok()) return out;
    }
    for (size_t i = 0; i < subs.size(); ++i)
      while (auto e = subs[i].channel->try_pop()) {
        EXPECT_NE(e->finish, FinishReason::kError) << e->error;
        if (!e->prompt_scores.empty()) out[i].scores = e->prompt_scores;
        if (e->token >= 0) out[i].tokens.push_back(e->token);
      }
    return out;
  };
  for (const char* name : {"gqa_untied", "tied_dk_ne_dv"}) {
    for (int64_t budget : {1024, 64}) {
      SCOPED_TRACE(std::string(name) + " budget " + std::to_string(budget));
      std::vector<RequestSpec> specs;
      for (int64_t n : {150, 5, 70, 2}) specs.push_back(greedy(prompt(n, n, 300), 4));
      const uint64_t before = cuda_backend_stats(*be)->bytes_to_host;
      const std::vector<Scored> dev = run(*be, name, specs, 0, budget);
      const uint64_t moved = cuda_backend_stats(*be)->bytes_to_host - before;
      const std::vector<Scored> host = run(*be, name, specs, 1, budget);
      const std::vector<Scored> ref = run(**cpu, name, specs, 0, budget);
      std::printf("%s, budget %lld: %llu bytes to the host with scores on the device\n", name,
                  static_cast<long long>(budget), static_cast<unsigned long long>(moved));
      EXPECT_LT(moved, uint64_t{227} * 300 * 4) << "every position's logits crossed to the host";
      for (size_t i = 0; i < specs.size(); ++i) {
        const size_t n = specs[i].prompt.size() - 1;
        ASSERT_EQ(dev[i].scores.size(), n) << "request " << i;
        ASSERT_EQ(host[i].scores.size(), n) << "request " << i;
        ASSERT_EQ(ref[i].scores.size(), n) << "request " << i;
        for (size_t p = 0; p < n; ++p) {
          EXPECT_EQ(dev[i].scores[p].token, specs[i].prompt[p + 1]);
          EXPECT_TRUE(dev[i].scores[p].top.empty());
          EXPECT_NEAR(dev[i].scores[p].logprob, host[i].scores[p].logprob, 1e-4) << "request " << i << " position " << p;
          EXPECT_NEAR(dev[i].scores[p].logprob, ref[i].scores[p].logprob, 1e-4) << "request " << i << " position " << p;
        }
        EXPECT_EQ(dev[i].tokens, host[i].tokens) << "request " << i;
        EXPECT_EQ(dev[i].tokens.size(), 4u) << "request " << i;
      }
    }
  }
}

}  // namespace
}  // namespace kiln
