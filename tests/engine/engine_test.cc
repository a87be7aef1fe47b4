// The engine end to end on the CPU backend: batched == alone (greedy), prefill split across
// cycles == whole, prefix-cache hit == miss, cancellation and every finish return all blocks and
// slots, the GDN slot counters, the per-cycle budget, the bounded queue, seeded sampling, the actor thread.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <thread>

#include "engine/engine.h"
#include "engine/engine_actor.h"
#include "forwarding_backend.h"
#include "model_fixture.h"

namespace kiln {
namespace {

using testing::prompt_of;

struct Output {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<std::vector<std::pair<int32_t, float>>> top;
  FinishReason finish = FinishReason::kNone;
};

// Greedy tokens of the simple path (`kiln generate`): one sequence, whole prompt, then decode.
std::vector<int32_t> alone(Qwen35Model& model, const std::vector<int32_t>& prompt, int64_t max_tokens) {
  auto state = model.create_state({1, (static_cast<int64_t>(prompt.size()) + max_tokens + 63) / 64}).value();
  auto seq = state.new_sequence().value();
  std::vector<int32_t> out, next = prompt;
  SamplingParams greedy;
  greedy.temperature = 0.f;
  Sampler s(greedy, 0);
  for (int64_t i = 0; i < max_tokens; ++i) {
    SequenceInput row{&seq, next};
    Tensor logits = model.forward({&row, 1}, LogitsMode::kLast, state).value();
    out.push_back(s.sample({logits.data<float>(), static_cast<size_t>(logits.dim(1))}, {}, {}).token);
    next = {out.back()};
  }
  state.release(seq);
  return out;
}

RequestSpec greedy_request(std::vector<int32_t> prompt, int64_t max_tokens) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.f;
  return r;
}

void drain(const Submission& s, std::map<uint64_t, Output>& outs) {
  while (auto e = s.channel->try_pop()) {
    Output& o = outs[s.id];
    if (e->token >= 0) {
      o.tokens.push_back(e->token);
      o.logprobs.push_back(e->logprob);
      o.top.emplace_back();
      for (const auto& t : e->top_logprobs) o.top.back().emplace_back(t.token, t.logprob);
    }
    if (e->finish != FinishReason::kNone) o.finish = e->finish;
  }
}

// Steps until the engine is idle, checking the per-cycle budget; returns each request's output.
std::map<uint64_t, Output> run_all(Engine& e, const std::vector<Submission>& subs, int64_t budget = 512) {
  std::map<uint64_t, Output> outs;
  for (int guard = 0; e.has_work() && guard < 10000; ++guard) {
    auto r = e.step();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (r.ok()) {
      EXPECT_LE(r->tokens, budget);
    }
    for (const auto& s : subs) drain(s, outs);
  }
  return outs;
}

// Everything is back in the free pools except what the prefix cache holds.
void expect_no_leaks(const Engine& e) {
  EngineStats s = e.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.waiting, 0);
  EXPECT_EQ(s.free_blocks + s.cached_blocks, s.total_blocks);
  EXPECT_EQ(s.free_slots + s.cached_snapshots, s.total_slots);
}

EngineConfig config(int64_t budget = 512, bool cache = true) {
  EngineConfig c;
  c.scheduler.max_batch_tokens = budget;
  c.scheduler.max_running = 16;
  c.kv_blocks = 96;
  c.snapshot_slots = 8;
  c.prefix_cache.enabled = cache;
  c.model_identity = "gqa_untied";
  return c;
}

TEST(Engine, BatchedGreedyEqualsAlone) {
  testing::TinyModel m;
  for (int n : {1, 4, 16}) {
    auto e = Engine::create(*m.model, config()).value();
    std::vector<Submission> subs;
    std::vector<std::vector<int32_t>> prompts;
    for (int i = 0; i < n; ++i) {
      prompts.push_back(prompt_of(3 + (i * 29) % 140, i));
      subs.push_back(e->submit(greedy_request(prompts.back(), 6)).value());
    }
    auto outs = run_all(*e, subs);
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(outs[subs[i].id].tokens, alone(*m.model, prompts[i], 6)) << "n=" << n << " request " << i;
      EXPECT_EQ(outs[subs[i].id].finish, FinishReason::kLength);
    }
    expect_no_leaks(*e);
  }
}

TEST(Engine, PrefillSplitAcrossCyclesEqualsWhole) {
  testing::TinyModel m;
  const auto prompt = prompt_of(200, 3), other = prompt_of(90, 4);
  const auto want = alone(*m.model, prompt, 5), want_other = alone(*m.model, other, 5);
  for (int64_t budget : {16, 64, 512})
    for (bool cache : {false, true}) {
      auto e = Engine::create(*m.model, config(budget, cache)).value();
      std::vector<Submission> subs = {e->submit(greedy_request(prompt, 5)).value(),
                                      e->submit(greedy_request(other, 5)).value()};
      auto outs = run_all(*e, subs, budget);
      EXPECT_EQ(outs[subs[0].id].tokens, want) << "budget " << budget << " cache " << cache;
      EXPECT_EQ(outs[subs[1].id].tokens, want_other) << "budget " << budget << " cache " << cache;
      expect_no_leaks(*e);
    }
}

TEST(Engine, ThinkingBudgetForcesTheClosingToken) {
  testing::TinyModel m;
  const auto prompt = prompt_of(20, 7);
  const auto free_run = alone(*m.model, prompt, 8);
  // Pick ids that the free run never produces, so the forced token is visible.
  int32_t open_id = 290, close_id = 291;
  while (std::count(free_run.begin(), free_run.end(), open_id) ||
         std::count(free_run.begin(), free_run.end(), close_id)) {
    open_id -= 2;
    close_id -= 2;
  }
  for (int64_t budget : {0, 3}) {
    auto e = Engine::create(*m.model, config()).value();
    RequestSpec r = greedy_request(prompt, 8);
    r.thinking = {budget, open_id, close_id, /*starts_open=*/true};
    Submission s = e->submit(r).value();
    auto outs = run_all(*e, {s});
    const auto& got = outs[s.id].tokens;
    ASSERT_EQ(got.size(), 8u);
    // The first `budget` tokens are the free run's; then the closing token; then greedy decoding
    // continues from the sequence that contains it.
    for (int64_t i = 0; i < budget; ++i) EXPECT_EQ(got[i], free_run[i]) << "budget " << budget;
    EXPECT_EQ(got[budget], close_id) << "budget " << budget;
    std::vector<int32_t> forced = prompt;
    forced.insert(forced.end(), got.begin(), got.begin() + budget + 1);
    const auto rest = alone(*m.model, forced, 8 - budget - 1);
    EXPECT_EQ(std::vector<int32_t>(got.begin() + budget + 1, got.end()), rest) << "budget " << budget;
    expect_no_leaks(*e);
  }
  // Not open at the start and never opened: no token is forced.
  auto e = Engine::create(*m.model, config()).value();
  RequestSpec r = greedy_request(prompt, 8);
  r.thinking = {0, open_id, close_id, false};
  Submission s = e->submit(r).value();
  EXPECT_EQ(run_all(*e, {s})[s.id].tokens, free_run);
  // A model that writes the opening token over and over inside the span spends the budget with
  // it: the open id biased up opens the span, counts twice, then the close is forced.
  r.thinking = {2, open_id, close_id, false};
  r.logit_bias = {{open_id, 100.f}};
  s = e->submit(r).value();
  const auto got = run_all(*e, {s})[s.id].tokens;
  ASSERT_GE(got.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 4), (std::vector<int32_t>{open_id, open_id, open_id, close_id}));
  EXPECT_EQ(got[4], open_id);  // the span may open again after it closed
}

TEST(Engine, PromptLogprobsScoreEveryPromptToken) {
  testing::TinyModel m;
  const auto prompt = prompt_of(150, 9);
  // The oracle: one whole-prompt forward with every position's logits.
  auto state = m.model->create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, prompt};
  Tensor all = m.model->forward({&row, 1}, LogitsMode::kAll, state).value();
  state.release(seq);
  const int64_t V = all.dim(1);
  for (int64_t budget : {64, 512}) {
    auto e = Engine::create(*m.model, config(budget, /*cache=*/true)).value();
    for (int round = 0; round < 2; ++round) {  // the second run would hit the prefix cache
      RequestSpec r = greedy_request(prompt, 2);
      r.prompt_logprobs = 3;
      Submission s = e->submit(r).value();
      std::vector<SampledToken> scores;
      for (int guard = 0; e->has_work() && guard < 1000; ++guard) {
        ASSERT_TRUE(e->step().ok());
        while (auto ev = s.channel->try_pop())
          if (!ev->prompt_scores.empty()) scores = ev->prompt_scores;
      }
      ASSERT_EQ(scores.size(), prompt.size() - 1) << "budget " << budget << " round " << round;
      for (size_t p = 0; p + 1 < prompt.size(); ++p) {
        const float* lg = all.data<float>() + static_cast<int64_t>(p) * V;
        double mx = lg[0], sum = 0;
        for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, lg[v]);
        for (int64_t v = 0; v < V; ++v) sum += std::exp(lg[v] - mx);
        const double want = lg[prompt[p + 1]] - mx - std::log(sum);
        EXPECT_NEAR(scores[p].logprob, want, 1e-4) << "position " << p;
        EXPECT_EQ(scores[p].token, prompt[p + 1]);
        ASSERT_EQ(scores[p].top.size(), 3u);
        EXPECT_GE(scores[p].top[0].logprob, scores[p].top[2].logprob);
      }
    }
    expect_no_leaks(*e);
  }
}

TEST(Engine, PrefixCacheHitEqualsMiss) {
  testing::TinyModel m;
  const auto p = prompt_of(150, 5);
  auto with_logprobs = [](std::vector<int32_t> prompt) {
    RequestSpec r = greedy_request(std::move(prompt), 6);
    r.sampling.top_logprobs = 3;
    return r;
  };
  auto e = Engine::create(*m.model, config()).value();
  auto first = e->submit(with_logprobs(p)).value();
  Output miss = run_all(*e, {first})[first.id];
  EXPECT_EQ(e->stats().prefix_hits, 0);
  EXPECT_EQ(e->stats().cached_blocks, 2);  // the prompt's two full blocks

  auto second = e->submit(with_logprobs(p)).value();
  Output hit = run_all(*e, {second})[second.id];
  EXPECT_EQ(e->stats().prefix_hits, 1);
  EXPECT_EQ(hit.tokens, miss.tokens);
  EXPECT_EQ(hit.logprobs, miss.logprobs);  // the hit runs exactly the miss's last chunk
  EXPECT_EQ(hit.top, miss.top);
  ASSERT_EQ(hit.top.size(), 6u);
  EXPECT_EQ(hit.top[0].size(), 3u);
  EXPECT_EQ(miss.tokens, alone(*m.model, p, 6));

  // A prompt sharing the first two blocks and ending mid-block, against a fresh engine's miss.
  auto p2 = std::vector<int32_t>(p.begin(), p.begin() + 128);
  for (int i = 0; i < 37; ++i) p2.push_back((i * 7 + 3) % 300);
  auto third = e->submit(with_logprobs(p2)).value();
  Output hit2 = run_all(*e, {third})[third.id];
  EXPECT_EQ(e->stats().prefix_hits, 2);
  auto fresh = Engine::create(*m.model, config()).value();
  auto f = fresh->submit(with_logprobs(p2)).value();
  Output miss2 = run_all(*fresh, {f})[f.id];
  EXPECT_EQ(fresh->stats().prefix_hits, 0);
  EXPECT_EQ(hit2.tokens, miss2.tokens);
  EXPECT_EQ(hit2.logprobs, miss2.logprobs);
  EXPECT_EQ(hit2.top, miss2.top);
  expect_no_leaks(*e);

  // Several concurrent requests sharing one prompt (some hit what the first one cached).
  std::vector<Submission> subs;
  for (int i = 0; i < 4; ++i) subs.push_back(fresh->submit(greedy_request(p, 6)).value());
  auto outs = run_all(*fresh, subs);
  for (const auto& s : subs) EXPECT_EQ(outs[s.id].tokens, miss.tokens);
  EXPECT_GE(fresh->stats().prefix_hits, 1);
  expect_no_leaks(*fresh);
}

TEST(Engine, CancellationFreesEverything) {
  testing::TinyModel m;
  EngineConfig c = config(64);
  c.scheduler.max_running = 2;
  auto e = Engine::create(*m.model, c).value();
  std::vector<Submission> subs;
  for (int i = 0; i < 3; ++i) subs.push_back(e->submit(greedy_request(prompt_of(100, i), 40)).value());
  std::map<uint64_t, Output> outs;
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e->step().ok());
  EXPECT_EQ(e->stats().running, 2);
  EXPECT_EQ(e->stats().waiting, 1);
  subs[0].channel->cancel();  // running (decoding by now)
  subs[2].channel->cancel();  // still waiting
  ASSERT_TRUE(e->step().ok());
  for (const auto& s : subs) drain(s, outs);
  EXPECT_EQ(outs[subs[0].id].finish, FinishReason::kCancelled);
  EXPECT_EQ(outs[subs[2].id].finish, FinishReason::kCancelled);
  EXPECT_TRUE(outs[subs[2].id].tokens.empty());
  subs[1].channel->cancel();
  auto rest = run_all(*e, subs, 64);
  EXPECT_EQ(rest[subs[1].id].finish, FinishReason::kCancelled);
  EXPECT_FALSE(e->has_work());
  expect_no_leaks(*e);
  EXPECT_EQ(e->stats().cached_blocks, e->stats().total_blocks - e->stats().free_blocks);
}

// The slot pool's counters, case by case, on a pool of 3 (2 running + 1 for snapshots); prompts
// of 100 tokens, whose first chunk ends at the 64-token boundary (a snapshot there).
TEST(Engine, GdnSlotCountersFollowEveryTakeAndGiveBack) {
  testing::TinyModel m;
  EngineConfig c = config();
  c.scheduler.max_running = 2;
  c.snapshot_slots = 1;
  auto e = Engine::create(*m.model, c).value();
  auto counters = [&] { return e->stats().slot_counters; };
  auto run = [&](std::vector<Submission> subs) { run_all(*e, subs); };

  run({e->submit(greedy_request(prompt_of(100, 1), 3)).value()});  // a miss: zeroed slot, one snapshot
  GdnSlotCounters g = counters();
  EXPECT_EQ(g.acquisitions, 1);
  EXPECT_EQ(g.restores, 0);
  EXPECT_EQ(g.snapshots, 1);
  EXPECT_EQ(g.sequence_releases, 1);
  EXPECT_EQ(g.cache_releases, 0);
  EXPECT_EQ(g.failures, 0);

  run({e->submit(greedy_request(prompt_of(100, 1), 3)).value()});  // the same prompt: a restore
  g = counters();
  EXPECT_EQ(g.acquisitions, 1);
  EXPECT_EQ(g.restores, 1);
  EXPECT_EQ(g.snapshots, 1);  // the prefix already has its snapshot
  EXPECT_EQ(g.sequence_releases, 2);

  // Two new prompts at once: both run, the snapshot holds the third slot, so neither boundary
  // finds a slot for its snapshot: two failures, and both requests still finish.
  run({e->submit(greedy_request(prompt_of(100, 2), 3)).value(), e->submit(greedy_request(prompt_of(100, 3), 3)).value()});
  g = counters();
  EXPECT_EQ(g.acquisitions, 3);
  EXPECT_EQ(g.snapshots, 1);
  EXPECT_EQ(g.failures, 2);
  EXPECT_EQ(g.sequence_releases, 4);

  // A cancelled running request gives its slot back; one cancelled while waiting never had one.
  auto a = e->submit(greedy_request(prompt_of(10, 4), 40)).value();
  auto b = e->submit(greedy_request(prompt_of(10, 5), 40)).value();
  auto w = e->submit(greedy_request(prompt_of(10, 6), 40)).value();
  ASSERT_TRUE(e->step().ok());
  EXPECT_EQ(e->stats().running, 2);
  a.channel->cancel();
  w.channel->cancel();
  ASSERT_TRUE(e->step().ok());
  b.channel->cancel();
  run({a, b, w});
  g = counters();
  EXPECT_EQ(g.acquisitions, 5);
  EXPECT_EQ(g.sequence_releases, 6);

  // A fourth prompt takes the free slot, then a snapshot of its boundary the last one; two more at
  // once need a slot the cache must give back: exactly one eviction of a snapshot.
  run({e->submit(greedy_request(prompt_of(100, 7), 3)).value()});
  EXPECT_EQ(counters().snapshots, 2);
  EXPECT_EQ(e->stats().cached_snapshots, 2);
  run({e->submit(greedy_request(prompt_of(100, 8), 3)).value(), e->submit(greedy_request(prompt_of(100, 9), 3)).value()});
  g = counters();
  EXPECT_EQ(g.cache_releases, 1);
  EXPECT_EQ(g.failures, 4);

  // Closed accounting once nothing runs.
  const EngineStats s = e->stats();
  EXPECT_EQ(g.acquisitions + g.restores, g.sequence_releases);
  EXPECT_EQ(g.snapshots, g.cache_releases + s.cached_snapshots);
  EXPECT_EQ(s.slot_bytes, ModelState::slot_bytes_for(m.model->config()));
  expect_no_leaks(*e);
}

TEST(Engine, BudgetSplitsDecodeAndPrefill) {
  testing::TinyModel m;
  auto e = Engine::create(*m.model, config(16)).value();
  auto a = e->submit(greedy_request(prompt_of(10, 1), 30)).value();
  ASSERT_TRUE(e->step().ok());  // a's whole prompt
  auto b = e->submit(greedy_request(prompt_of(100, 2), 3)).value();
  auto r = e->step().value();
  EXPECT_EQ(r.decode_rows, 1);   // a decodes first
  EXPECT_EQ(r.prefill_rows, 1);  // then b's first chunk gets the rest of the budget
  EXPECT_EQ(r.tokens, 16);
  run_all(*e, {a, b}, 16);
  expect_no_leaks(*e);
}

TEST(Engine, QueueFullAndBadRequestsAreRefused) {
  testing::TinyModel m;
  EngineConfig c = config();
  c.scheduler.max_queue = 2;
  auto e = Engine::create(*m.model, c).value();
  ASSERT_TRUE(e->submit(greedy_request(prompt_of(5), 2)).ok());
  ASSERT_TRUE(e->submit(greedy_request(prompt_of(5), 2)).ok());
  auto full = e->submit(greedy_request(prompt_of(5), 2));
  EXPECT_EQ(full.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(full.status().message().find("queue full"), std::string::npos);

  struct Bad {
    RequestSpec spec;
    ErrorCode code;
    const char* names;
  };
  std::vector<Bad> bad;
  bad.push_back({greedy_request({}, 2), ErrorCode::kInvalidArgument, "prompt"});
  bad.push_back({greedy_request({1, 300}, 2), ErrorCode::kInvalidArgument, "300"});
  bad.push_back({greedy_request({1}, 0), ErrorCode::kInvalidArgument, "max_tokens"});
  bad.push_back({greedy_request({1}, 96 * 64), ErrorCode::kInvalidArgument, "K/V blocks"});
  RequestSpec adapter = greedy_request({1}, 2);
  adapter.adapter = "nope";
  bad.push_back({adapter, ErrorCode::kNotFound, "nope"});
  RequestSpec top_p = greedy_request({1}, 2);
  top_p.sampling.top_p = 1.5f;
  bad.push_back({top_p, ErrorCode::kInvalidArgument, "top_p"});
  for (const auto& b : bad) {
    auto r = e->submit(b.spec);
    EXPECT_EQ(r.status().code(), b.code) << b.names;
    EXPECT_NE(r.status().message().find(b.names), std::string::npos) << r.status().message();
  }
  run_all(*e, {});
  expect_no_leaks(*e);
}

TEST(Engine, SeededSamplingDoesNotDependOnTheBatch) {
  testing::TinyModel m;
  auto sampled = [](uint64_t seed) {
    RequestSpec r;
    r.prompt = prompt_of(20, 9);
    r.max_tokens = 12;
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.9f;
    r.seed = seed;
    return r;
  };
  auto e = Engine::create(*m.model, config()).value();
  std::vector<Submission> subs = {e->submit(sampled(42)).value(), e->submit(greedy_request(prompt_of(50), 12)).value(),
                                  e->submit(sampled(42)).value(), e->submit(sampled(43)).value()};
  auto outs = run_all(*e, subs);
  auto lone = Engine::create(*m.model, config()).value();
  auto l = lone->submit(sampled(42)).value();
  auto lone_out = run_all(*lone, {l});
  EXPECT_EQ(outs[subs[0].id].tokens, outs[subs[2].id].tokens);
  EXPECT_EQ(outs[subs[0].id].tokens, lone_out[l.id].tokens);
  EXPECT_NE(outs[subs[0].id].tokens, outs[subs[3].id].tokens);
  expect_no_leaks(*e);
}

// The CPU backend's sampling facet, counting `sample` calls: the engine must never make one
// there (its logits are host tensors, drawn by each request's Sampler).
class CountingSampling final : public SamplingFacet {
 public:
  explicit CountingSampling(SamplingFacet& inner) : inner_(inner) {}
  Support supports(const SampleRequest& r) const override { return inner_.supports(r); }
  Status argmax(const ArgmaxArgs& a) override { return inner_.argmax(a); }
  Status sample(const SampleArgs& a) override {
    ++calls;
    return inner_.sample(a);
  }
  int calls = 0;

 private:
  SamplingFacet& inner_;
};

class CountingBackend final : public testing::ForwardingBackend {
 public:
  CountingBackend() : ForwardingBackend(create_backend("cpu").value()), sampling_(inner().sampling()) {}
  SamplingFacet& sampling() override { return sampling_; }
  CountingSampling sampling_;
};

// Seeded sampling at temperature > 0 (penalties, top-k, top-p) gives the same tokens and
// logprobs with EngineConfig::device_sampling on and off; on the CPU both are the host Sampler.
TEST(Engine, SeededSamplingIsTheSameWithDeviceSamplingOnAndOff) {
  CountingBackend be;
  auto model = Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/gqa_untied", be).value();
  auto sampled = [](uint64_t seed) {
    RequestSpec r;
    r.prompt = prompt_of(16, 4);
    r.max_tokens = 10;
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.9f;
    r.sampling.repetition_penalty = 1.2f;
    r.sampling.presence_penalty = 0.3f;
    r.seed = seed;
    return r;
  };
  std::vector<Output> runs;
  for (bool device : {true, false}) {
    EngineConfig c = config();
    c.device_sampling = device;
    auto e = Engine::create(*model, c).value();
    std::vector<Submission> subs = {e->submit(sampled(7)).value(), e->submit(sampled(8)).value()};
    auto outs = run_all(*e, subs);
    runs.push_back(outs[subs[0].id]);
    runs.push_back(outs[subs[1].id]);
    expect_no_leaks(*e);
  }
  ASSERT_EQ(runs[0].tokens.size(), 10u);
  EXPECT_EQ(runs[0].tokens, runs[2].tokens);
  EXPECT_EQ(runs[0].logprobs, runs[2].logprobs);
  EXPECT_EQ(runs[1].tokens, runs[3].tokens);
  EXPECT_NE(runs[0].tokens, runs[1].tokens) << "different seeds should draw differently";
  EXPECT_EQ(be.sampling_.calls, 0) << "the CPU backend has no device sampling path";
}

TEST(Engine, FullChannelPausesDecoding) {
  testing::TinyModel m;
  EngineConfig c = config();
  c.channel_capacity = 2;
  auto e = Engine::create(*m.model, c).value();
  auto a = e->submit(greedy_request(prompt_of(8), 6)).value();
  for (int i = 0; i < 4; ++i) ASSERT_TRUE(e->step().ok());
  auto r = e->step().value();
  EXPECT_EQ(r.tokens, 0);  // two events wait unread: no decoding
  auto outs = run_all(*e, {a});
  EXPECT_EQ(outs[a.id].tokens, alone(*m.model, prompt_of(8), 6));
  expect_no_leaks(*e);
}

TEST(Engine, DestroyingTheEngineFinishesEveryRequest) {
  testing::TinyModel m;
  EngineConfig c = config();
  c.scheduler.max_running = 1;
  auto e = Engine::create(*m.model, c).value();
  auto a = e->submit(greedy_request(prompt_of(10), 20)).value();
  auto b = e->submit(greedy_request(prompt_of(10), 20)).value();
  ASSERT_TRUE(e->step().ok());
  e.reset();
  std::map<uint64_t, Output> outs;
  drain(a, outs);
  drain(b, outs);
  EXPECT_EQ(outs[a.id].finish, FinishReason::kCancelled);
  EXPECT_EQ(outs[b.id].finish, FinishReason::kCancelled);
}

TEST(EngineActor, StreamsTokensFromItsThread) {
  testing::TinyModel m;
  std::vector<std::vector<int32_t>> prompts = {prompt_of(30, 1), prompt_of(70, 2), prompt_of(5, 3), prompt_of(129, 4)};
  std::vector<std::vector<int32_t>> want;
  for (const auto& p : prompts) want.push_back(alone(*m.model, p, 8));
  EngineActor actor(Engine::create(*m.model, config(64)).value());
  std::vector<Submission> subs;
  for (const auto& p : prompts) subs.push_back(actor.submit(greedy_request(p, 8)).value());
  for (size_t i = 0; i < subs.size(); ++i) {
    std::vector<int32_t> got;
    FinishReason finish = FinishReason::kNone;
    while (finish == FinishReason::kNone) {
      auto ev = subs[i].channel->pop(std::chrono::milliseconds(20000));
      ASSERT_TRUE(ev.has_value()) << "no event within 20 s";
      if (ev->token >= 0) got.push_back(ev->token);
      finish = ev->finish;
    }
    EXPECT_EQ(got, want[i]) << i;
    EXPECT_EQ(finish, FinishReason::kLength);
  }
  EXPECT_EQ(actor.last_error(), "");
  // Each request's last event is pushed before its blocks return, so wait for the release.
  for (int i = 0; i < 2000 && actor.stats().running > 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EngineStats s = actor.stats();
  EXPECT_EQ(s.running, 0);
  EXPECT_EQ(s.free_blocks + s.cached_blocks, s.total_blocks);
  EXPECT_EQ(s.free_slots + s.cached_snapshots, s.total_slots);
}

}  // namespace
}  // namespace kiln
