// Per-row token constraints and logit bias in sampling: a constrained row samples only allowed
// ids (greedy: the best allowed logit; drawn: from the softmax renormalised over the allowed ids),
// a bias is added before every transform, unconstrained rows of the same batch are untouched, and
// through the engine a constrained request follows its constraint to the stop id, after the
// reasoning span when asked to.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>

#include "engine/engine.h"
#include "backend/registry.h"
#include "backend/sampling_math.h"
#include "engine/row_sampling.h"
#include "model_fixture.h"
#include "scripted_constraint.h"

namespace kiln {
namespace {

using testing::prompt_of;
using testing::ScriptedConstraint;

std::unique_ptr<Sequence> sequence(uint64_t id, RequestSpec spec) {
  return std::make_unique<Sequence>(id, std::move(spec), PrefixKey{}, 1000 + id, std::make_shared<TokenChannel>(64));
}

RequestSpec request(float temperature, bool logprobs = false) {
  RequestSpec r;
  r.prompt = {1, 2, 3};
  r.sampling.temperature = temperature;
  r.sampling.logprobs = logprobs;
  return r;
}

// Logits row r: id i gets ((i * 37 + r * 11) % V) / 10, a spread with one clear argmax.
Tensor host_logits(int64_t rows, int64_t V) {
  Tensor t = Tensor::empty({rows, V}, DType::kF32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < V; ++i) t.data<float>()[r * V + i] = static_cast<float>((i * 37 + r * 11) % V) / 10.f;
  return t;
}

int32_t argmax_of(const float* row, int64_t V, const std::set<int32_t>& among) {
  int32_t best = -1;
  for (int32_t i = 0; i < V; ++i)
    if ((among.empty() || among.count(i)) && (best < 0 || row[i] > row[best])) best = i;
  return best;
}

TEST(ConstrainedSampling, MaskedAndBiasedRowsBesideFreeRowsOnTheHost) {
  auto backend = std::move(create_backend("cpu").value());
  const int64_t V = 100;
  const Tensor logits = host_logits(4, V);
  const std::set<int32_t> allowed = {3, 17, 42};
  auto greedy_c = request(0.f);
  auto c1 = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{allowed});
  greedy_c.constraint = c1;
  auto drawn_c = request(1.f, /*logprobs=*/true);
  auto c2 = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{allowed}, /*cheap=*/false);
  drawn_c.constraint = c2;
  auto biased = request(0.f);
  biased.logit_bias = {{5, 100.f}};
  std::vector<std::unique_ptr<Sequence>> seqs;
  seqs.push_back(sequence(1, greedy_c));
  seqs.push_back(sequence(2, request(0.f)));
  seqs.push_back(sequence(3, drawn_c));
  seqs.push_back(sequence(4, biased));
  std::vector<RowToSample> rows;
  for (int64_t i = 0; i < 4; ++i) rows.push_back({seqs[static_cast<size_t>(i)].get(), i});
  const float* L = logits.data<float>();

  auto out = sample_rows(*backend, logits, rows).value();
  EXPECT_EQ(out[0].token, argmax_of(L, V, allowed));
  EXPECT_NE(argmax_of(L, V, allowed), argmax_of(L, V, {})) << "the test needs the best allowed id not to be the argmax";
  EXPECT_EQ(out[1].token, argmax_of(L + V, V, {}));
  EXPECT_TRUE(allowed.count(out[2].token)) << out[2].token;
  // The drawn row's logprob is its token's under the softmax renormalised over the allowed ids.
  double z = 0;
  for (int32_t i : allowed) z += std::exp(static_cast<double>(L[2 * V + i]));
  EXPECT_NEAR(out[2].logprob, static_cast<double>(L[2 * V + out[2].token]) - std::log(z), 1e-5);
  EXPECT_EQ(out[3].token, 5);
  EXPECT_EQ(c1->fills, 1);
  EXPECT_EQ(c2->fills, 1);
}

TEST(ConstrainedSampling, DrawnRowsNeverLeaveTheMaskAndFreeRowsDo) {
  auto backend = std::move(create_backend("cpu").value());
  const int64_t V = 64;
  Tensor flat = Tensor::empty({2, V}, DType::kF32);
  for (int64_t i = 0; i < 2 * V; ++i) flat.data<float>()[i] = 0.f;  // uniform
  const std::set<int32_t> allowed = {7, 8, 60};
  auto c = request(1.f);
  c.constraint = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{allowed});
  auto seq_c = sequence(1, c), seq_f = sequence(2, request(1.f));
  std::set<int32_t> seen_c, seen_f;
  for (int k = 0; k < 200; ++k) {
    std::vector<RowToSample> rows = {{seq_c.get(), 0}, {seq_f.get(), 1}};
    auto out = sample_rows(*backend, flat, rows).value();
    seen_c.insert(out[0].token);
    seen_f.insert(out[1].token);
  }
  EXPECT_EQ(seen_c, allowed);  // each of the three, at 1/3 each over 200 draws
  EXPECT_GT(seen_f.size(), allowed.size());
}

TEST(ConstrainedSampling, BiasOfMinus100RemovesTheArgmax) {
  std::vector<float> row = {1.f, 5.f, 2.f, 4.f};
  const std::vector<std::pair<int32_t, float>> bias = {{1, -100.f}, {2, 0.5f}};
  apply_bias_and_mask(row, bias, nullptr);
  EXPECT_EQ(row[1], -95.f);
  EXPECT_EQ(row[2], 2.5f);
  const uint32_t mask = (1u << 0) | (1u << 2);
  apply_bias_and_mask(row, {}, &mask);
  EXPECT_EQ(row[0], 1.f);
  EXPECT_TRUE(std::isinf(row[1]) && row[1] < 0);
  EXPECT_EQ(row[2], 2.5f);
  EXPECT_TRUE(std::isinf(row[3]) && row[3] < 0);
}

TEST(ConstrainedSampling, CostlyMasksAreFilledOverThePool) {
  std::vector<std::unique_ptr<Sequence>> seqs;
  std::vector<std::shared_ptr<ScriptedConstraint>> cs;
  std::vector<RowToSample> rows;
  for (int i = 0; i < 6; ++i) {
    auto r = request(0.f);
    if (i % 3 != 2) {
      cs.push_back(std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{i, 40 + i}}, i % 2 == 0));
      r.constraint = cs.back();
    }
    seqs.push_back(sequence(static_cast<uint64_t>(i + 1), r));
    rows.push_back({seqs.back().get(), i});
  }
  std::vector<uint32_t> masks;
  std::vector<int64_t> mask_of;
  ASSERT_TRUE(fill_constraint_masks(rows, 70, masks, mask_of).ok());
  const size_t words = 3;
  ASSERT_EQ(masks.size(), 4 * words);
  for (int i = 0; i < 6; ++i) {
    if (i % 3 == 2) {
      EXPECT_EQ(mask_of[static_cast<size_t>(i)], -1);
      continue;
    }
    const uint32_t* m = masks.data() + static_cast<size_t>(mask_of[static_cast<size_t>(i)]) * words;
    for (int id = 0; id < 70; ++id)
      EXPECT_EQ((m[id >> 5] >> (id & 31)) & 1u, id == i || id == 40 + i ? 1u : 0u) << "row " << i << " id " << id;
  }
}

// Greedy tokens of one request alone through a fresh engine.
std::vector<int32_t> run_one(Qwen35Model& model, RequestSpec r, FinishReason* finish = nullptr) {
  EngineConfig c;
  c.scheduler.max_running = 8;
  c.kv_blocks = 32;
  c.snapshot_slots = 0;
  auto e = Engine::create(model, c).value();
  Submission s = e->submit(std::move(r)).value();
  std::vector<int32_t> out;
  while (e->has_work()) EXPECT_TRUE(e->step().ok());
  while (auto ev = s.channel->try_pop()) {
    if (ev->token >= 0) out.push_back(ev->token);
    if (finish && ev->finish != FinishReason::kNone) *finish = ev->finish;
  }
  return out;
}

TEST(ConstrainedSampling, EngineBatchesConstrainedBiasedAndFreeRows) {
  testing::TinyModel m;
  EngineConfig c;
  c.scheduler.max_running = 8;
  c.kv_blocks = 32;
  c.snapshot_slots = 0;
  auto e = Engine::create(*m.model, c).value();
  const int32_t stop = 299;
  // Constrained greedy: exactly 10, 20, 30, then the stop id.
  RequestSpec greedy = request(0.f);
  greedy.prompt = prompt_of(12, 1);
  greedy.max_tokens = 16;
  greedy.stop_token_ids = {stop};
  auto script = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{10}, {20}, {30}, {stop}});
  greedy.constraint = script;
  // Constrained drawn: from {4, 5, 6} for 5 tokens, then the stop id.
  RequestSpec drawn = request(1.f);
  drawn.prompt = prompt_of(9, 2);
  drawn.max_tokens = 16;
  drawn.seed = 7;
  drawn.stop_token_ids = {stop};
  drawn.constraint = std::make_shared<ScriptedConstraint>(
      std::vector<std::set<int32_t>>{{4, 5, 6}, {4, 5, 6}, {4, 5, 6}, {4, 5, 6}, {4, 5, 6}, {stop}});
  // Biased greedy: +100 on 77 outweighs any logit of the tiny model.
  RequestSpec biased = request(0.f);
  biased.prompt = prompt_of(7, 3);
  biased.max_tokens = 5;
  biased.logit_bias = {{77, 100.f}};
  RequestSpec free = request(0.f);
  free.prompt = prompt_of(10, 4);
  free.max_tokens = 6;
  const std::vector<int32_t> free_alone = run_one(*m.model, free);

  std::vector<Submission> subs;
  for (RequestSpec* r : {&greedy, &drawn, &biased, &free}) subs.push_back(e->submit(*r).value());
  std::map<uint64_t, std::vector<int32_t>> got;
  std::map<uint64_t, FinishReason> finish;
  while (e->has_work()) {
    ASSERT_TRUE(e->step().ok());
    for (const auto& s : subs)
      while (auto ev = s.channel->try_pop()) {
        if (ev->token >= 0) got[s.id].push_back(ev->token);
        if (ev->finish != FinishReason::kNone) finish[s.id] = ev->finish;
      }
  }
  EXPECT_EQ(got[subs[0].id], (std::vector<int32_t>{10, 20, 30, stop}));
  EXPECT_EQ(finish[subs[0].id], FinishReason::kStop);
  EXPECT_EQ(script->accepted, (std::vector<int32_t>{10, 20, 30, stop}));
  ASSERT_EQ(got[subs[1].id].size(), 6u);
  for (size_t i = 0; i < 5; ++i) EXPECT_TRUE(got[subs[1].id][i] >= 4 && got[subs[1].id][i] <= 6) << got[subs[1].id][i];
  EXPECT_EQ(got[subs[1].id][5], stop);
  EXPECT_EQ(got[subs[2].id], std::vector<int32_t>(5, 77));
  EXPECT_EQ(got[subs[3].id], free_alone);
}

TEST(ConstrainedSampling, ConstraintStartsAfterTheReasoningCloses) {
  testing::TinyModel m;
  const int32_t open_id = 280, close_id = 281, stop = 299;
  RequestSpec r = request(0.f);
  r.prompt = prompt_of(12, 5);
  r.max_tokens = 12;
  r.stop_token_ids = {stop};
  r.thinking = {2, open_id, close_id, /*starts_open=*/true};  // two free tokens, then the close is forced
  auto script = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{11}, {stop}});
  r.constraint = script;
  r.constraint_after = close_id;
  RequestSpec unconstrained = r;
  unconstrained.constraint = nullptr;
  unconstrained.max_tokens = 2;
  const std::vector<int32_t> free_run = run_one(*m.model, unconstrained);
  FinishReason finish = FinishReason::kNone;
  const std::vector<int32_t> got = run_one(*m.model, r, &finish);
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(std::vector<int32_t>(got.begin(), got.begin() + 2), free_run);
  EXPECT_EQ(got[2], close_id);
  EXPECT_EQ(got[3], 11);
  EXPECT_EQ(got[4], stop);
  EXPECT_EQ(finish, FinishReason::kStop);
  EXPECT_EQ(script->accepted, (std::vector<int32_t>{11, stop}));
}

// A template that leaves the reasoning span to the model: the first token may open it (then the
// reasoning is free and the constraint starts after the close) or begin the constrained output
// (then the opening id is never offered again).
TEST(ConstrainedSampling, AFirstTokenMayOpenTheReasoningBeforeTheConstraint) {
  testing::TinyModel m;
  const int32_t open_id = 280, close_id = 281, stop = 299;
  auto spec = [&](float open_bias) {
    RequestSpec r = request(0.f);
    r.prompt = prompt_of(12, 6);
    r.max_tokens = 12;
    r.stop_token_ids = {stop};
    // A budget of no reasoning tokens: once opened, the span's close is forced next (the open id's
    // bias would otherwise pick it again and again).
    r.thinking = {0, open_id, close_id, /*starts_open=*/false};
    r.constraint_after = close_id;
    r.optional_reasoning_open = open_id;
    r.logit_bias = {{open_id, open_bias}};
    return r;
  };
  // The open id biased up: it is the first token though the constraint allows only 11, the span
  // closes, then the constraint applies (it never saw the span's tokens).
  RequestSpec opens = spec(100.f);
  auto script = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{11}, {stop}});
  opens.constraint = script;
  FinishReason finish = FinishReason::kNone;
  std::vector<int32_t> got = run_one(*m.model, opens, &finish);
  EXPECT_EQ(got, (std::vector<int32_t>{open_id, close_id, 11, stop}));
  EXPECT_EQ(finish, FinishReason::kStop);
  EXPECT_EQ(script->accepted, (std::vector<int32_t>{11, stop}));
  // The constraint's first id biased further up than the open id: the output follows the constraint
  // from the first token, and the open id (still biased up at every step) is not allowed again.
  RequestSpec direct = spec(50.f);
  auto first = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{12}, {13}, {stop}});
  direct.constraint = first;
  direct.logit_bias.push_back({12, 100.f});
  got = run_one(*m.model, direct, &finish);
  EXPECT_EQ(got, (std::vector<int32_t>{12, 13, stop}));
  EXPECT_EQ(first->accepted, (std::vector<int32_t>{12, 13, stop}));
}

TEST(ConstrainedSampling, SubmitRefusesBadBiasAndIgnoreEos) {
  testing::TinyModel m;
  auto e = Engine::create(*m.model, EngineConfig{}).value();
  RequestSpec r = request(0.f);
  r.logit_bias = {{300, 1.f}};
  EXPECT_NE(e->submit(r).status().message().find("logit_bias.300"), std::string::npos);
  r.logit_bias = {{3, 101.f}};
  EXPECT_NE(e->submit(r).status().message().find("[-100, 100]"), std::string::npos);
  r.logit_bias.assign(kMaxLogitBias + 1, {1, 1.f});
  EXPECT_FALSE(e->submit(r).ok());
  r.logit_bias.clear();
  r.constraint = std::make_shared<ScriptedConstraint>(std::vector<std::set<int32_t>>{{1}});
  r.ignore_eos = true;
  EXPECT_NE(e->submit(r).status().message().find("ignore_eos"), std::string::npos);
}

}  // namespace
}  // namespace kiln
