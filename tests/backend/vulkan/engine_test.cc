// The serving engine on Vulkan: eight concurrent greedy streams for 256 steps give the CPU
// engine's tokens, and once every stream decodes, no step asks the driver for memory; a request
// whose prompt the prefix cache holds gives the tokens of the same request computed from scratch;
// rows drawn at temperature > 0 are sampled on the device as the CPU draws them; structured-output
// rows are sampled on the device too, and where a backend declines them (a test backend over this
// one), they take the fallback policy's counted host path and give the same tokens.
#include <gtest/gtest.h>

#include "backend/fallback.h"
#include "backend/rotating_constraint.h"
#include "backend/vulkan/vulkan_backend.h"
#include "backend/vulkan/vulkan_test_util.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "model/qwen35.h"

namespace kiln {
namespace {

std::string fixture_dir(const char* name) { return std::string(KILN_FIXTURES_DIR) + "/reference/" + name; }

std::vector<int32_t> prompt(int64_t n, int64_t salt) {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < n; ++i) p.push_back(static_cast<int32_t>((i * 31 + salt * 17 + 3) % 300));
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

struct EngineRun {
  std::vector<std::vector<int32_t>> tokens;
  uint64_t allocations_once_decoding = 0, allocations_at_end = 0;
  EngineStats stats;
};

// Runs each group of requests to completion in turn (a group submitted before its first cycle).
EngineRun run_engine(Backend& be, const std::vector<std::vector<RequestSpec>>& groups, bool prefix_cache) {
  EngineRun run;
  auto model = Qwen35Model::load(fixture_dir("gqa_untied"), be);
  EXPECT_TRUE(model.ok()) << model.status().to_string();
  if (!model.ok()) return run;
  EngineConfig ec;
  ec.scheduler.max_running = 8;
  ec.scheduler.max_batch_tokens = 1024;
  ec.kv_blocks = 64;
  ec.prefix_cache.enabled = prefix_cache;
  auto engine = Engine::create(**model, ec);
  EXPECT_TRUE(engine.ok()) << engine.status().to_string();
  if (!engine.ok()) return run;
  for (const auto& specs : groups) {
    std::vector<Submission> subs;
    for (const RequestSpec& s : specs) subs.push_back((*engine)->submit(s).value());
    int64_t decode_only = 0;
    while ((*engine)->has_work()) {
      auto r = (*engine)->step();
      EXPECT_TRUE(r.ok()) << r.status().to_string();
      if (!r.ok()) return run;
      // After a few cycles of decode alone, the pools hold everything a step needs.
      if (r->prefill_rows == 0 && ++decode_only == 4) {
        if (auto stats = vulkan_backend_stats(be); stats.ok()) run.allocations_once_decoding = stats->memory.driver_allocations;
      }
    }
    for (Submission& sub : subs) {
      std::vector<int32_t> toks;
      while (auto e = sub.channel->try_pop()) {
        EXPECT_NE(e->finish, FinishReason::kError) << e->error;
        if (e->token >= 0) toks.push_back(e->token);
      }
      run.tokens.push_back(toks);
    }
  }
  if (auto stats = vulkan_backend_stats(be); stats.ok()) run.allocations_at_end = stats->memory.driver_allocations;
  run.stats = (*engine)->stats();
  return run;
}

TEST(VulkanEngine, EightStreamsFor256StepsEqualTheCpuAndAllocateNothingWhileDecoding) {
  KILN_VULKAN_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  std::vector<RequestSpec> specs;
  for (int64_t i = 0; i < 8; ++i) specs.push_back(greedy(prompt(3 + 9 * i, i), 256));
  EngineRun v = run_engine(*be, {specs}, false), c = run_engine(*cpu, {specs}, false);
  ASSERT_EQ(v.tokens.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(v.tokens[i].size(), 256u) << i;
    EXPECT_EQ(v.tokens[i], c.tokens[i]) << "stream " << i;
  }
  EXPECT_GT(v.allocations_once_decoding, 0u);
  EXPECT_EQ(v.allocations_at_end, v.allocations_once_decoding);
}

TEST(VulkanEngine, PrefixCacheHitEqualsMiss) {
  KILN_VULKAN_OR_SKIP(be);
  const RequestSpec r = greedy(prompt(200, 5), 24);
  EngineRun cached = run_engine(*be, {{r}, {r}}, true);
  EngineRun fresh = run_engine(*be, {{r}}, false);
  ASSERT_EQ(cached.tokens.size(), 2u);
  EXPECT_GE(cached.stats.prefix_hits, 1);
  EXPECT_EQ(cached.tokens[1], cached.tokens[0]);
  EXPECT_EQ(cached.tokens[1], fresh.tokens[0]);
  EXPECT_EQ(fresh.tokens[0].size(), 24u);
}

// Rows drawn at temperature > 0 (penalties, top-p and logprobs among them) are sampled on the
// device: no host round trip is counted, and the seeded draws give the CPU engine's tokens.
TEST(VulkanEngine, DrawnRowsSampleOnTheDeviceAsTheCpuDraws) {
  KILN_VULKAN_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  FallbackCounters& counters = FallbackCounters::global();
  const uint64_t before = counters.count("vulkan", 1);
  std::vector<RequestSpec> specs;
  for (int64_t i = 0; i < 3; ++i) {
    RequestSpec r = greedy(prompt(20 + 7 * i, 2 + i), 16);
    r.sampling.temperature = 0.8f;
    r.sampling.logprobs = true;
    r.seed = 5 + static_cast<uint64_t>(i);
    specs.push_back(r);
  }
  specs[1].sampling.top_p = 0.9f;
  specs[1].sampling.top_logprobs = 3;
  specs[2].sampling.repetition_penalty = 1.2f;
  specs[2].sampling.frequency_penalty = 0.3f;
  EngineRun v = run_engine(*be, {specs}, false), c = run_engine(*cpu, {specs}, false);
  ASSERT_EQ(v.tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(v.tokens[i].size(), 16u) << i;
    EXPECT_EQ(v.tokens[i], c.tokens[i]) << "stream " << i;
  }
  EXPECT_EQ(counters.count("vulkan", 1), before);
}

// A sampling facet that declines every structured-output request and forwards the rest: what a
// backend without masks and biases in its sampler answers.
class DecliningConstrainedSampling final : public SamplingFacet {
 public:
  explicit DecliningConstrainedSampling(SamplingFacet& inner) : inner_(inner) {}
  Support supports(const SampleRequest& r) const override {
    return r.constrained ? Support::host_fallback("this test backend applies no masks or biases")
                         : inner_.supports(r);
  }
  Status argmax(const ArgmaxArgs& a) override { return inner_.argmax(a); }
  Status sample(const SampleArgs& a) override { return inner_.sample(a); }

 private:
  SamplingFacet& inner_;
};

class DecliningVulkan final : public testing::ForwardingBackend {
 public:
  explicit DecliningVulkan(std::unique_ptr<Backend> vulkan)
      : ForwardingBackend(std::move(vulkan)), sampling_(inner().sampling()) {}
  SamplingFacet& sampling() override { return sampling_; }

 private:
  DecliningConstrainedSampling sampling_;
};

// Structured-output rows (a greedy row under a token mask; a drawn row with a logit bias) beside a
// free drawn row. On Vulkan the masks and biases go up with the step's sampling parameters and no
// step takes a host round trip. On a backend that declines them (the same device behind a
// sampler that refuses constrained requests), each step with such rows goes through the fallback
// policy: one counted host round trip a step, the rows sampled on the host. Both give the CPU
// engine's tokens.
TEST(VulkanEngine, ConstrainedRowsOnTheDeviceOrTheCountedHostPathEqualTheCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  auto specs = [] {
    std::vector<RequestSpec> s;
    for (int64_t i = 0; i < 3; ++i) s.push_back(greedy(prompt(12 + 5 * i, 7 + i), 10));
    s[0].constraint = std::make_shared<testing::RotatingConstraint>(300);
    s[0].ignore_eos = false;
    s[1].sampling.temperature = 0.7f;
    s[1].seed = 11;
    s[1].logit_bias = {{7, 4.f}, {100, -100.f}};
    s[2].sampling.temperature = 0.9f;
    s[2].seed = 12;
    return s;
  };
  FallbackCounters& counters = FallbackCounters::global();
  const EngineRun c = run_engine(*cpu, {specs()}, false);
  uint64_t before = counters.count("vulkan", 1);
  const EngineRun v = run_engine(*be, {specs()}, false);
  EXPECT_EQ(counters.count("vulkan", 1), before) << "native masks and biases take no host round trip";
  DecliningVulkan declining(std::move(be));
  before = counters.count("vulkan", 1);
  const EngineRun d = run_engine(declining, {specs()}, false);
  // The three prompts prefill in one step; from there every step samples the biased row.
  EXPECT_EQ(counters.count("vulkan", 1) - before, 10u);
  ASSERT_EQ(c.tokens.size(), 3u);
  ASSERT_EQ(v.tokens.size(), 3u);
  ASSERT_EQ(d.tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(v.tokens[i], c.tokens[i]) << "stream " << i << " on the device";
    EXPECT_EQ(d.tokens[i], c.tokens[i]) << "stream " << i << " through the host fallback";
  }
  EXPECT_EQ(c.tokens[1].size(), 10u);
}

}  // namespace
}  // namespace kiln
