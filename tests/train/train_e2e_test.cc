// run_training end to end with the real LoraTrainer on a random-weight `tiny` model (vocab 512,
// 3 GDN layers + 1 attention layer, CPU): SFT on four fixed token sequences drives the loss down at
// least 5x (AdamW and Muon) and greedy decoding through Qwen35Model::forward with the trained
// adapter as a LoraTerm reproduces every taught continuation; the same seed gives the same adapter
// bit for bit; GRPO raises the log-probability (computed from the forward's logits, not the
// trainer) of the rewarded completion and lowers the other's. The controls end to end: four
// micro-batches train as one batch of four, packed training is unpacked training, and the
// held-out loss is the serving forward's mean cross-entropy of the held-out answers.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/registry.h"
#include "model/init.h"
#include "model/qwen35.h"
#include "test_util.h"
#include "train/train_run.h"

namespace kiln {
namespace {

struct Tiny {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Qwen35Model> model;
};
Tiny& tiny_model() {
  static Tiny* t = [] {
    auto* m = new Tiny;
    m->backend = std::move(create_backend("cpu").value());
    const std::string dir = testing::temp_dir("train-e2e");
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir, {.seed = 5, .quiet = true}).ok());
    auto loaded = Qwen35Model::load(dir, *m->backend);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (loaded.ok()) m->model = std::move(loaded).value();
    std::filesystem::remove_all(dir);
    return m;
  }();
  return *t;
}

constexpr int kPrompt = 3, kAnswer = 5;

// Four prompts, each with its own arbitrary five-token answer.
std::vector<TrainSequence> taught() {
  std::vector<TrainSequence> out;
  for (int32_t i = 0; i < 4; ++i) {
    TrainSequence s;
    s.tokens = {11 + i, 37 + 5 * i, 90 + i};
    for (int k = 0; k < kAnswer; ++k) s.tokens.push_back((131 + 97 * i + 53 * k) % 512);
    s.roles.assign(kPrompt, TokenRole::kContext);
    s.roles.resize(kPrompt + kAnswer, TokenRole::kTarget);
    out.push_back(s);
  }
  return out;
}

// Greedy decoding of `n` tokens after `prompt`, one sequence, with the adapter or without.
std::vector<int32_t> greedy(Qwen35Model& m, const std::vector<int32_t>& prompt, int n, const LoraAdapter* ad) {
  auto state = m.create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  const LoraTerm term{ad, 1.f};
  std::span<const LoraTerm> lora = ad ? std::span<const LoraTerm>(&term, 1) : std::span<const LoraTerm>();
  std::vector<int32_t> out, feed = prompt;
  for (int k = 0; k < n; ++k) {
    SequenceInput row{&seq, feed, lora};
    auto logits = m.forward({&row, 1}, LogitsMode::kLast, state);
    EXPECT_TRUE(logits.ok()) << logits.status().to_string();
    if (!logits.ok()) return out;
    const float* l = logits->data<float>();
    const int64_t v = logits->dim(-1);
    const int32_t best = static_cast<int32_t>(std::max_element(l, l + v) - l);
    out.push_back(best);
    feed = {best};
  }
  return out;
}

// sum_t log p(tokens[t] | tokens[<t]) over t >= from, in double from the forward's logits.
double sequence_logp(Qwen35Model& m, const std::vector<int32_t>& tokens, size_t from, const LoraAdapter* ad) {
  auto state = m.create_state({1, 4}).value();
  auto seq = state.new_sequence().value();
  const LoraTerm term{ad, 1.f};
  SequenceInput row{&seq, tokens, ad ? std::span<const LoraTerm>(&term, 1) : std::span<const LoraTerm>()};
  auto logits = m.forward({&row, 1}, LogitsMode::kAll, state);
  EXPECT_TRUE(logits.ok()) << logits.status().to_string();
  if (!logits.ok()) return NAN;
  const int64_t v = logits->dim(-1);
  double sum = 0;
  for (size_t t = from; t < tokens.size(); ++t) {
    const float* l = logits->data<float>() + (t - 1) * v;
    double mx = l[0], z = 0;
    for (int64_t j = 0; j < v; ++j) mx = std::max(mx, static_cast<double>(l[j]));
    for (int64_t j = 0; j < v; ++j) z += std::exp(l[j] - mx);
    sum += l[tokens[t]] - mx - std::log(z);
  }
  return sum;
}

std::vector<float> flatten(const LoraAdapter& a) {
  std::vector<float> out;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      for (const Tensor* x : {&f.a, &f.b}) out.insert(out.end(), x->data<float>(), x->data<float>() + x->numel());
    }
  return out;
}

struct SftCase {
  OptimizerKind kind;
  float lr;
  int64_t epochs;
};

void sft_learns(const SftCase& c) {
  Qwen35Model& m = *tiny_model().model;
  TrainSpec spec;
  spec.lora.rank = 8;
  spec.lora.alpha = 16;
  spec.optimizer = c.kind;
  spec.hyper.lr = c.lr;
  spec.epochs = c.epochs;
  spec.batch_sequences = 4;  // every step sees all four: the losses are comparable
  spec.seed = 1;
  spec.sft = taught();
  std::atomic<bool> cancel{false};
  auto r = run_training(m, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->losses.size(), static_cast<size_t>(c.epochs));
  const double first = r->losses.front(), last = r->losses.back();
  std::printf("%s: loss %.4f -> %.4f in %zu steps, %.3f s (%.1f ms/step)\n", std::string(optimizer_kind_name(c.kind)).c_str(),
              first, last, r->losses.size(), r->seconds, 1e3 * r->seconds / r->losses.size());
  // A fresh adapter changes nothing: the first loss is the base model's, near ln(512) = 6.24.
  EXPECT_GT(first, 5.0);
  EXPECT_LT(last, first / 5) << optimizer_kind_name(c.kind) << " did not cut the loss 5x";
  for (const TrainSequence& s : spec.sft) {
    const std::vector<int32_t> prompt(s.tokens.begin(), s.tokens.begin() + kPrompt);
    const std::vector<int32_t> answer(s.tokens.begin() + kPrompt, s.tokens.end());
    EXPECT_EQ(greedy(m, prompt, kAnswer, &r->adapter), answer) << optimizer_kind_name(c.kind);
    EXPECT_NE(greedy(m, prompt, kAnswer, nullptr), answer);  // the base model did not know it
  }
}

TEST(TrainEndToEnd, SftWithAdamWLearnsTheContinuations) { sft_learns({OptimizerKind::kAdamW, 1e-2f, 40}); }
// Muon's orthogonalised step has a fixed size per factor (sqrt(max(rows, cols)) times a matrix of
// unit singular values), so it wants a smaller lr than AdamW here (1e-2 plateaus near 1.6).
TEST(TrainEndToEnd, SftWithMuonLearnsTheContinuations) { sft_learns({OptimizerKind::kMuon, 3e-3f, 40}); }

TEST(TrainEndToEnd, SameSeedAndDataGiveTheSameAdapter) {
  Qwen35Model& m = *tiny_model().model;
  TrainSpec spec;
  spec.lora.rank = 4;
  spec.epochs = 3;
  spec.batch_sequences = 2;
  spec.seed = 7;
  spec.hyper.lr = 1e-2f;
  spec.sft = taught();
  std::atomic<bool> cancel{false};
  auto a = run_training(m, spec, {}, cancel), b = run_training(m, spec, {}, cancel);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(flatten(a->adapter), flatten(b->adapter));
  EXPECT_EQ(a->losses, b->losses);
}

TEST(TrainEndToEnd, GrpoRaisesTheRewardedCompletion) {
  Qwen35Model& m = *tiny_model().model;
  const std::vector<int32_t> prompt = {5, 6, 7};
  auto completion = [&](std::vector<int32_t> tail, double reward) {
    GrpoCompletion c;
    c.sequence.tokens = prompt;
    c.sequence.tokens.insert(c.sequence.tokens.end(), tail.begin(), tail.end());
    c.sequence.roles.assign(prompt.size(), TokenRole::kContext);
    c.sequence.roles.resize(c.sequence.tokens.size(), TokenRole::kTarget);
    c.reward = reward;
    return c;
  };
  GrpoGroup g;
  g.completions = {completion({301, 302, 303}, 1.0), completion({401, 402, 403}, 0.0)};
  TrainSpec spec;
  spec.kind = TrainSpec::Kind::kGrpo;
  spec.lora.rank = 4;
  spec.optimizer = OptimizerKind::kAdamW;
  spec.hyper.lr = 5e-3f;
  spec.epochs = 5;
  spec.batch_sequences = 2;
  spec.kl = KlEstimator::kK3;
  spec.grpo = {g};
  std::atomic<bool> cancel{false};
  auto r = run_training(m, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const auto& good = g.completions[0].sequence.tokens;
  const auto& bad = g.completions[1].sequence.tokens;
  const double good0 = sequence_logp(m, good, prompt.size(), nullptr), good1 = sequence_logp(m, good, prompt.size(), &r->adapter);
  const double bad0 = sequence_logp(m, bad, prompt.size(), nullptr), bad1 = sequence_logp(m, bad, prompt.size(), &r->adapter);
  std::printf("GRPO: rewarded logp %.3f -> %.3f, other %.3f -> %.3f\n", good0, good1, bad0, bad1);
  EXPECT_GT(good1, good0 + 0.5);
  EXPECT_LT(bad1, bad0);
}

// Four prompts with answers of 2 to 5 tokens: means over the wrong tokens would show.
std::vector<TrainSequence> uneven() {
  std::vector<TrainSequence> out = taught();
  for (int32_t i = 0; i < 4; ++i) {
    out[i].tokens.resize(kPrompt + 2 + i);
    out[i].roles.resize(kPrompt + 2 + i);
  }
  return out;
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0, biggest = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    biggest = std::max(biggest, std::fabs(static_cast<double>(a[i])));
  }
  return worst / biggest;
}

// One step on 4 micro-batches of one sequence against one step on one batch of all 4 (the
// default optimizer, clipping and schedule, from the same fresh adapter): the same loss, gradient
// norm and update up to the f32 order of the gradient sums (seen: loss 1.6e-7, norm 1.7e-5, update
// 1.6e-5 of its largest element). One step: over several, this stiff random model and Muon's
// orthogonalisation carry those last bits into the trajectory (3 steps: 3e-5 of the loss), which
// says nothing about accumulation. LossScale's tests show the means across micro-batches.
TEST(TrainEndToEnd, FourMicroBatchesStepAsOneBatchOfFour) {
  Qwen35Model& m = *tiny_model().model;
  TrainSpec one;
  one.lora.rank = 4;
  one.hyper.lr = 3e-3f;
  one.batch_sequences = 4;
  one.seed = 2;
  one.sft = uneven();
  TrainSpec acc = one;
  acc.batch_sequences = 1;
  acc.accumulation_steps = 4;
  TrainSpec still = one;  // the fresh adapter: a step at rate 0
  still.optimizer = OptimizerKind::kSgd;
  still.hyper.lr = 0.f;
  std::atomic<bool> cancel{false};
  auto a = run_training(m, one, {}, cancel), b = run_training(m, acc, {}, cancel), s = run_training(m, still, {}, cancel);
  ASSERT_TRUE(a.ok() && b.ok() && s.ok()) << a.status().to_string() << b.status().to_string() << s.status().to_string();
  ASSERT_EQ(a->losses.size(), 1u);
  ASSERT_EQ(b->losses.size(), 1u);
  EXPECT_NEAR(b->losses[0], a->losses[0], 1e-6 * a->losses[0]);
  EXPECT_NEAR(b->grad_norms[0], a->grad_norms[0], 1e-4 * a->grad_norms[0]);
  const std::vector<float> init = flatten(s->adapter), fa = flatten(a->adapter), fb = flatten(b->adapter);
  std::vector<float> da, db;
  for (size_t i = 0; i < init.size(); ++i) da.push_back(fa[i] - init[i]), db.push_back(fb[i] - init[i]);
  const double d = max_rel_diff(da, db);
  std::printf("accumulation: loss %.9g vs %.9g, norm %.9g vs %.9g, update differs by %.3g of its largest element\n",
              a->losses[0], b->losses[0], a->grad_norms[0], b->grad_norms[0], d);
  EXPECT_LT(d, 1e-3);
}

// Packing two 8-token sequences into each 16-token sequence, one a step, against two sequences a
// step unpacked: the same shuffle gives the same pairs, the packed examples are rows of their
// own, so every loss, gradient norm and the adapter are the same bit for bit.
TEST(TrainEndToEnd, PackedTrainingEqualsUnpackedTraining) {
  Qwen35Model& m = *tiny_model().model;
  TrainSpec unpacked;
  unpacked.lora.rank = 4;
  unpacked.hyper.lr = 3e-3f;
  unpacked.epochs = 3;
  unpacked.batch_sequences = 2;
  unpacked.seed = 4;
  unpacked.sft = taught();
  TrainSpec packed = unpacked;
  packed.batch_sequences = 1;
  packed.pack_tokens = 2 * (kPrompt + kAnswer);
  std::atomic<bool> cancel{false};
  auto u = run_training(m, unpacked, {}, cancel), p = run_training(m, packed, {}, cancel);
  ASSERT_TRUE(u.ok() && p.ok()) << u.status().to_string() << p.status().to_string();
  ASSERT_EQ(p->losses.size(), 6u);
  EXPECT_EQ(p->losses, u->losses);
  EXPECT_EQ(p->grad_norms, u->grad_norms);
  EXPECT_EQ(flatten(p->adapter), flatten(u->adapter));
  EXPECT_LT(p->losses.back(), p->losses.front());
}

// One of the four sequences held out (eval_fraction 0.25): its loss after the last step is the
// mean cross-entropy of its answer tokens under the trained adapter, computed here from the
// serving forward's logits.
TEST(TrainEndToEnd, TheHeldOutLossIsTheServingForwardsCrossEntropyOfTheHeldOutAnswers) {
  Qwen35Model& m = *tiny_model().model;
  TrainSpec spec;
  spec.lora.rank = 4;
  spec.hyper.lr = 3e-3f;
  spec.epochs = 4;
  spec.batch_sequences = 3;
  spec.seed = 3;
  spec.sft = taught();
  spec.eval_fraction = 0.25;
  spec.eval_every = 2;
  std::atomic<bool> cancel{false};
  auto r = run_training(m, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->losses.size(), 4u);
  ASSERT_EQ(r->eval_losses.size(), 2u);
  EXPECT_EQ(r->eval_losses[0].step, 2);
  EXPECT_EQ(r->eval_losses[1].step, 4);
  // The held-out sequence is the one whose held-out loss the forward reproduces; exactly one does.
  int matches = 0;
  for (const TrainSequence& s : spec.sft) {
    const double nll = -sequence_logp(m, s.tokens, kPrompt, &r->adapter) / kAnswer;
    if (std::fabs(nll - r->eval_losses[1].loss) < 1e-4 * nll) ++matches;
  }
  std::printf("held-out loss %.5f after step 2, %.5f after step 4; training loss %.5f -> %.5f\n", r->eval_losses[0].loss,
              r->eval_losses[1].loss, r->losses.front(), r->losses.back());
  EXPECT_EQ(matches, 1);
}

}  // namespace
}  // namespace kiln
