// Prompt scores (prompt_logprobs) through the engine. Rows asking only for their own tokens'
// logprobs (prompt_logprobs 0) are scored on the backend by the fused log-probabilities over the LM
// head, without every position's logits; each case holds them to the log-softmax, in double, of
// the logits of one whole-prompt forward (every position, kAll) of the same weights, and holds the
// generated tokens to those of the same request without scores: one prompt, rows of several
// lengths in one cycle, a prompt chunked over cycles and one tiled within a forward, an adapter's
// row, a tied LM head, rows mixed with one that wants alternatives (the whole cycle then takes the
// host path), and a backend whose training facet declines (the host path, never the fused call).
#include <gtest/gtest.h>

#include <cmath>

#include "backend/declining_training.h"
#include "engine/engine.h"
#include "forwarding_backend.h"
#include "model/random_adapter.h"
#include "model_fixture.h"

namespace kiln {
namespace {

using testing::prompt_of;

// Forwards every training call and counts the fused log-probability calls.
class CountingTraining final : public TrainingFacet {
 public:
  explicit CountingTraining(TrainingFacet& inner) : inner_(inner) {}
  Support supports(const TrainRequest& r) const override { return inner_.supports(r); }
  Status gemm(const GemmArgs& a) override { return inner_.gemm(a); }
  Status norm_backward(const NormBackwardArgs& a) override { return inner_.norm_backward(a); }
  Status silu_mul_backward(const SiluMulBackwardArgs& a) override { return inner_.silu_mul_backward(a); }
  Status rope_backward(const RopeBackwardArgs& a) override { return inner_.rope_backward(a); }
  Status attention_backward(const AttentionBackwardArgs& a) override { return inner_.attention_backward(a); }
  Status conv_backward(const ConvBackwardArgs& a) override { return inner_.conv_backward(a); }
  Status gdn_backward(const GdnBackwardArgs& a) override { return inner_.gdn_backward(a); }
  Status token_logprobs(const TokenLogprobArgs& a) override {
    ++calls;
    return inner_.token_logprobs(a);
  }
  Status token_logprobs_backward(const TokenLogprobBackwardArgs& a) override {
    return inner_.token_logprobs_backward(a);
  }
  int calls = 0;

 private:
  TrainingFacet& inner_;
};

// The CPU backend with its training facet counted, or declining every request.
class TestBackend final : public testing::ForwardingBackend {
 public:
  explicit TestBackend(bool decline)
      : ForwardingBackend(std::move(create_backend("cpu").value())), counting_(inner().training()),
        declining_("declined by the test") {
    decline_ = decline;
  }
  TrainingFacet& training() override { return decline_ ? static_cast<TrainingFacet&>(declining_) : counting_; }
  int fused_calls() const { return counting_.calls; }

 private:
  CountingTraining counting_;
  DecliningTraining declining_;
  bool decline_ = false;
};

struct Model {
  explicit Model(const char* fixture = "gqa_untied", bool decline = false)
      : backend(decline),
        model(std::move(
            Qwen35Model::load(std::string(KILN_FIXTURES_DIR) + "/reference/" + fixture, backend).value())) {}
  TestBackend backend;
  std::unique_ptr<Qwen35Model> model;
};

// The oracle: log softmax(logits[p])[prompt[p + 1]] in double, from one whole-prompt forward.
std::vector<double> oracle(Qwen35Model& model, const std::vector<int32_t>& prompt, std::vector<LoraTerm> lora = {}) {
  auto state = model.create_state({1, (static_cast<int64_t>(prompt.size()) + 63) / 64}).value();
  auto seq = state.new_sequence().value();
  SequenceInput row{&seq, prompt, lora};
  Tensor all = model.forward({&row, 1}, LogitsMode::kAll, state).value();
  state.release(seq);
  const int64_t V = all.dim(1);
  std::vector<double> out;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    const float* lg = all.data<float>() + static_cast<int64_t>(p) * V;
    double mx = lg[0], sum = 0;
    for (int64_t v = 0; v < V; ++v) mx = std::max<double>(mx, lg[v]);
    for (int64_t v = 0; v < V; ++v) sum += std::exp(lg[v] - mx);
    out.push_back(lg[prompt[p + 1]] - mx - std::log(sum));
  }
  return out;
}

EngineConfig config(int64_t budget) {
  EngineConfig c;
  c.scheduler.max_batch_tokens = budget;
  c.scheduler.max_running = 16;
  c.kv_blocks = 96;
  c.snapshot_slots = 8;
  c.model_identity = "fixture";
  return c;
}

RequestSpec request(std::vector<int32_t> prompt, int32_t prompt_logprobs) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = 4;
  r.sampling.temperature = 0.f;
  r.prompt_logprobs = prompt_logprobs;
  return r;
}

struct Scored {
  std::vector<SampledToken> scores;
  std::vector<int32_t> tokens;
};

// Submits every spec before the first cycle and steps until idle; `prefill_rows` gets each
// cycle's prefill row count.
std::vector<Scored> run(Engine& e, const std::vector<RequestSpec>& specs, std::vector<int64_t>* prefill_rows = nullptr) {
  std::vector<Submission> subs;
  for (const RequestSpec& s : specs) subs.push_back(e.submit(s).value());
  std::vector<Scored> out(specs.size());
  for (int guard = 0; e.has_work() && guard < 1000; ++guard) {
    auto r = e.step();
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) break;
    if (prefill_rows) prefill_rows->push_back(r->prefill_rows);
    for (size_t i = 0; i < subs.size(); ++i)
      while (auto ev = subs[i].channel->try_pop()) {
        EXPECT_NE(ev->finish, FinishReason::kError) << ev->error;
        if (!ev->prompt_scores.empty()) out[i].scores = ev->prompt_scores;
        if (ev->token >= 0) out[i].tokens.push_back(ev->token);
      }
  }
  return out;
}

// `got` scores `prompt` as the oracle does, with `top` alternatives each.
void expect_scores(const Scored& got, const std::vector<int32_t>& prompt, const std::vector<double>& want, size_t top,
                   const std::string& what) {
  ASSERT_EQ(got.scores.size(), prompt.size() - 1) << what;
  for (size_t p = 0; p + 1 < prompt.size(); ++p) {
    EXPECT_EQ(got.scores[p].token, prompt[p + 1]) << what << " position " << p;
    EXPECT_NEAR(got.scores[p].logprob, want[p], 1e-4) << what << " position " << p;
    EXPECT_EQ(got.scores[p].top.size(), top) << what << " position " << p;
  }
}

// The generated tokens of `spec` without prompt scores, on a fresh engine.
std::vector<int32_t> unscored_tokens(Qwen35Model& model, RequestSpec spec) {
  spec.prompt_logprobs = -1;
  auto e = Engine::create(model, config(512)).value();
  return run(*e, {spec})[0].tokens;
}

TEST(PromptScores, OwnTokensAreScoredByTheFusedCallAsEveryPositionsLogitsScoreThem) {
  for (const char* fixture : {"gqa_untied", "tied_dk_ne_dv"}) {  // the second ties the LM head to the embedding
    Model m(fixture);
    const auto prompt = prompt_of(150, 3);
    const auto want = oracle(*m.model, prompt);
    auto e = Engine::create(*m.model, config(512)).value();
    // The second round runs after the first left the prompt's blocks in the prefix cache.
    for (int round = 0; round < 2; ++round) {
      const int before = m.backend.fused_calls();
      const Scored got = run(*e, {request(prompt, 0)})[0];
      expect_scores(got, prompt, want, 0, std::string(fixture) + " round " + std::to_string(round));
      EXPECT_GT(m.backend.fused_calls(), before) << fixture;
      EXPECT_EQ(got.tokens, unscored_tokens(*m.model, request(prompt, 0))) << fixture;
    }
    // prompt_logprobs 1 (the host path) reports the same logprob of each token, and one alternative.
    const int before = m.backend.fused_calls();
    const Scored host = run(*e, {request(prompt, 1)})[0];
    EXPECT_EQ(m.backend.fused_calls(), before);
    expect_scores(host, prompt, want, 1, fixture);
  }
}

TEST(PromptScores, RowsOfSeveralLengthsInOneCycle) {
  Model m;
  const std::vector<std::vector<int32_t>> prompts = {prompt_of(2, 1), prompt_of(70, 2), prompt_of(133, 4),
                                                     prompt_of(9, 5)};
  std::vector<RequestSpec> specs;
  for (const auto& p : prompts) specs.push_back(request(p, 0));
  RequestSpec unscored = request(prompt_of(40, 6), -1);  // a row without scores between scoring ones
  specs.insert(specs.begin() + 2, unscored);
  auto e = Engine::create(*m.model, config(512)).value();
  std::vector<int64_t> rows;
  const auto got = run(*e, specs, &rows);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], 5);  // every prompt in the first cycle
  for (size_t i = 0, k = 0; i < specs.size(); ++i) {
    if (i == 2) {
      EXPECT_TRUE(got[i].scores.empty());
      EXPECT_EQ(got[i].tokens, unscored_tokens(*m.model, unscored));
      continue;
    }
    expect_scores(got[i], prompts[k], oracle(*m.model, prompts[k]), 0, "prompt " + std::to_string(k));
    EXPECT_EQ(got[i].tokens, unscored_tokens(*m.model, specs[i])) << "prompt " << k;
    ++k;
  }
}

TEST(PromptScores, APromptChunkedOverCyclesOrTiledInOneForward) {
  Model m;
  const auto prompt = prompt_of(150, 7);
  const auto want = oracle(*m.model, prompt);
  const auto tokens = unscored_tokens(*m.model, request(prompt, 0));
  {  // a budget of 64: chunks of 64, 64 and 22 tokens in three cycles
    auto e = Engine::create(*m.model, config(64)).value();
    std::vector<int64_t> rows;
    const Scored got = run(*e, {request(prompt, 0)}, &rows)[0];
    ASSERT_GE(rows.size(), 3u);
    EXPECT_EQ(rows[0] + rows[1] + rows[2], 3);
    expect_scores(got, prompt, want, 0, "chunked");
    EXPECT_EQ(got.tokens, tokens);
  }
  {  // one cycle whose forward runs as passes of 64 tokens, beside a second, short row
    m.model->options().prefill_tile = 64;
    auto e = Engine::create(*m.model, config(512)).value();
    const auto short_prompt = prompt_of(30, 8);
    const auto got = run(*e, {request(prompt, 0), request(short_prompt, 0)});
    expect_scores(got[0], prompt, want, 0, "tiled");
    expect_scores(got[1], short_prompt, oracle(*m.model, short_prompt), 0, "tiled, short row");
    m.model->options().prefill_tile = -1;
    EXPECT_EQ(got[0].tokens, tokens);
  }
}

TEST(PromptScores, AnAdaptersRowIsScoredWithItsAdapter) {
  Model m;
  auto adapter = std::make_shared<const LoraAdapter>(
      testing::random_adapter(m.model->config(), m.backend.storage(), 11, 4, 8, 0.5f));
  const auto prompt = prompt_of(100, 9);
  const auto want = oracle(*m.model, prompt, {{adapter.get(), 1.f}});
  const auto base = oracle(*m.model, prompt);
  ASSERT_GT(std::abs(want[5] - base[5]), 1e-2);  // the adapter changes the scores
  RequestSpec adapted = request(prompt, 0);
  adapted.private_adapter = adapter;
  adapted.private_key = "teacher@1";
  auto e = Engine::create(*m.model, config(512)).value();
  const auto got = run(*e, {adapted, request(prompt, 0)});  // with a base-model row in the same cycle
  expect_scores(got[0], prompt, want, 0, "adapter");
  expect_scores(got[1], prompt, base, 0, "base");
  EXPECT_EQ(got[0].tokens, unscored_tokens(*m.model, adapted));
}

TEST(PromptScores, ARowWantingAlternativesTakesTheCycleToTheHost) {
  Model m;
  const auto own = prompt_of(60, 10), alt = prompt_of(50, 11);  // each within a block: one cycle
  auto e = Engine::create(*m.model, config(512)).value();
  std::vector<int64_t> rows;
  const auto got = run(*e, {request(own, 0), request(alt, 1)}, &rows);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows[0], 2);
  EXPECT_EQ(m.backend.fused_calls(), 0);
  expect_scores(got[0], own, oracle(*m.model, own), 0, "prompt_logprobs 0");
  expect_scores(got[1], alt, oracle(*m.model, alt), 1, "prompt_logprobs 1");
  EXPECT_EQ(got[0].tokens, unscored_tokens(*m.model, request(own, 0)));
  EXPECT_EQ(got[1].tokens, unscored_tokens(*m.model, request(alt, 1)));
}

TEST(PromptScores, ABackendThatDeclinesTheFusedCallScoresOnTheHost) {
  Model m("gqa_untied", /*decline=*/true);
  const auto prompt = prompt_of(90, 12);
  auto e = Engine::create(*m.model, config(512)).value();
  // The declining facet refuses any call, so a forward that made one would fail the request.
  const Scored got = run(*e, {request(prompt, 0)})[0];
  expect_scores(got, prompt, oracle(*m.model, prompt), 0, "declined");
  EXPECT_EQ(got.tokens, unscored_tokens(*m.model, request(prompt, 0)));
}

TEST(PromptScores, AForwardRefusesScoreSpansThatDoNotMatchItsTokens) {
  Model m;
  auto state = m.model->create_state({1, 1}).value();
  auto seq = state.new_sequence().value();
  const std::vector<int32_t> tokens = {1, 2, 3}, targets = {2, 3};
  std::vector<float> scores(2);
  SequenceInput row{&seq, tokens, {}, targets, scores};
  Result<Tensor> r = m.model->forward({&row, 1}, LogitsMode::kLast, state);
  EXPECT_EQ(r.status().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(r.status().to_string().find("score_targets (2)"), std::string::npos) << r.status().to_string();
  EXPECT_EQ(seq.length, 0);
  state.release(seq);
}

}  // namespace
}  // namespace kiln
