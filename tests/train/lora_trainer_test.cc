// LoraTrainer: the gradient of a loss of per-token log-probabilities with respect to every LoRA
// factor, checked against central finite differences of the same loss computed through the
// serving forward (Qwen35Model::forward with the adapter as a LoraTerm, log-softmax in double
// here), on the tiny preset (GDN + attention) and an all-attention variant; against transformers
// + peft (tests/fixtures/lora_grad_reference, tools/make_lora_grad_reference.py); the
// checkpoint segment length changes nothing; packed examples keep their state and attention apart.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>

#include "backend/registry.h"
#include "model/init.h"
#include "model/safetensors.h"
#include "test_util.h"
#include "train/train_sequences.h"
#include "train/lora_trainer.h"
#include "train/packing.h"
#include "train/token_loss.h"

namespace kiln {
namespace {

std::string fixture(const std::string& rel) { return std::string(KILN_FIXTURES_DIR) + "/" + rel; }

struct TrainerSetup {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  std::unique_ptr<Qwen35Model> model;
  std::optional<LoraAdapter> adapter;

  void load(const std::string& dir) {
    auto m = Qwen35Model::load(dir, *backend);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(m).value();
  }
  // The tiny preset in f32, with every layer of `kind` when given.
  void tiny(std::optional<LayerKind> kind, int64_t layers = 4) {
    ModelConfig c = preset_config("tiny").value();
    c.num_layers = layers;
    c.layer_types.resize(layers, LayerKind::kLinearAttention);
    if (kind) std::fill(c.layer_types.begin(), c.layer_types.end(), *kind);
    const std::string dir = testing::temp_dir("trainer");
    InitOptions o;
    o.seed = 7, o.dtype = DType::kF32, o.quiet = true;
    ASSERT_TRUE(write_random_checkpoint(c, dir, o).ok());
    load(dir);
    std::filesystem::remove_all(dir);
  }
  // Every target, rank 4, B drawn non-zero so that the gradients of A are too.
  void random_adapter(uint64_t seed) {
    LoraConfig cfg;
    cfg.rank = 4;
    cfg.alpha = 8;
    for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
    adapter.emplace(LoraAdapter::init(cfg, model->config(), seed, backend->storage()).value());
    for (int64_t l = 0; l < adapter->num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        LoraFactors& f = adapter->factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        Tensor b = testing::random_tensor(f.b.shape(), static_cast<uint32_t>(seed * 100 + l * 10 + t), 0.25f);
        ASSERT_TRUE(backend->storage().copy_from_host(b, f.b).ok());
      }
  }
};

std::vector<TrainSequence> sequences(int64_t vocab, std::vector<int64_t> lengths, int64_t first_target) {
  return testing::random_sequences(vocab, lengths, first_target, 12345u);
}
using testing::sft_coef;

// logp[s][t] through the serving forward (each sequence fresh, the adapter as a LoraTerm),
// log-softmax in double here.
std::vector<std::vector<double>> serving_logprobs(TrainerSetup& s, const std::vector<TrainSequence>& seqs) {
  const LoraTerm term{&*s.adapter, 1.f};
  std::vector<std::vector<double>> out;
  for (const auto& sq : seqs) {
    auto state = s.model->create_state({1, 8}).value();
    auto seq = state.new_sequence().value();
    SequenceInput row{&seq, sq.tokens, {&term, 1}};
    Tensor logits = s.model->forward({&row, 1}, LogitsMode::kAll, state).value();
    const int64_t V = logits.dim(1);
    out.emplace_back(sq.tokens.size(), 0.0);
    for (size_t t = 1; t < sq.tokens.size(); ++t) {
      const float* l = logits.data<float>() + (t - 1) * V;
      double mx = -INFINITY, sum = 0;
      for (int64_t v = 0; v < V; ++v) mx = std::max(mx, static_cast<double>(l[v]));
      for (int64_t v = 0; v < V; ++v) sum += std::exp(l[v] - mx);
      out.back()[t] = l[sq.tokens[t]] - mx - std::log(sum);
    }
  }
  return out;
}

double serving_loss(TrainerSetup& s, const std::vector<TrainSequence>& seqs, const std::vector<std::vector<float>>& coef) {
  const auto lp = serving_logprobs(s, seqs);
  double loss = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t t = 1; t < seqs[i].tokens.size(); ++t) loss += coef[i][t] * lp[i][t];
  return loss;
}

// For every factor: the trainer's gradient against central differences of serving_loss at its
// largest-gradient element and one other.
void check_against_finite_differences(TrainerSetup& s, const std::vector<TrainSequence>& seqs, int64_t checkpoint_every) {
  // Central differences at h and h/2, extrapolated (Richardson: (4 D(h/2) - D(h)) / 3 cancels the
  // h^2 term): the tiny random model is stiff (its first GDN layer most), so plain central
  // differences at h = 1e-3 are off by up to 20% where its gradients are largest (25). The f32
  // forward's rounding (~1e-6 of a loss ~6) leaves ~5e-3 of noise at h = 5e-4. Allowed: 1e-2 of
  // the factor's largest |gradient| plus 5e-3 (seen: at most 4e-3 of it).
  constexpr double kH = 5e-4, kRel = 1e-2, kAbs = 5e-3;
  TrainerOptions opts;
  opts.checkpoint_every = checkpoint_every;
  opts.gdn_chunk = 4;  // several chunks per sequence in the GDN backward
  auto trainer = LoraTrainer::create(*s.model, *s.adapter, opts).value();
  const auto coef = sft_coef(seqs);
  auto lp = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_TRUE(lp.ok()) << lp.status().to_string();
  Status st = trainer->backward(coef);
  ASSERT_TRUE(st.ok()) << st.to_string();
  int checked = 0;
  for (int64_t l = 0; l < s.adapter->num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      LoraFactors& f = s.adapter->factors(l, target);
      if (!f.defined()) continue;
      const LoraFactors& g = trainer->grads().factors(l, target);
      for (bool is_b : {false, true}) {
        const Tensor& p = is_b ? f.b : f.a;
        const Tensor& gp = is_b ? g.b : g.a;
        int64_t big = 0;
        double gmax = 0;
        for (int64_t i = 0; i < gp.numel(); ++i)
          if (std::fabs(gp.data<float>()[i]) > gmax) gmax = std::fabs(gp.data<float>()[i]), big = i;
        EXPECT_GT(gmax, 1e-3) << s.adapter->tensor_name(l, target, is_b) << ": a zero gradient tests nothing";
        for (int64_t i : {big, p.numel() / 3}) {
          float& v = p.data<float>()[i];
          const float keep = v;
          auto central = [&](double h) {
            v = static_cast<float>(keep + h);
            const double up = serving_loss(s, seqs, coef);
            const double step = static_cast<double>(v) - keep;
            v = static_cast<float>(keep - h);
            const double down = serving_loss(s, seqs, coef);
            const double back = keep - static_cast<double>(v);
            v = keep;
            return (up - down) / (step + back);
          };
          const double fd = (4 * central(kH / 2) - central(kH)) / 3;
          EXPECT_NEAR(gp.data<float>()[i], fd, kRel * gmax + kAbs)
              << s.adapter->tensor_name(l, target, is_b) << " element " << i;
          ++checked;
        }
      }
    }
  EXPECT_GT(checked, 0);
}

TEST(LoraTrainer, AttentionOnlyModelMatchesFiniteDifferencesOfTheServingForward) {
  TrainerSetup s;
  s.tiny(LayerKind::kFullAttention, 2);
  s.random_adapter(3);
  check_against_finite_differences(s, sequences(s.model->config().vocab_size, {9, 70}, 3), 1);
}

TEST(LoraTrainer, HybridModelMatchesFiniteDifferencesOfTheServingForward) {
  TrainerSetup s;
  s.tiny(std::nullopt);
  s.random_adapter(5);
  check_against_finite_differences(s, sequences(s.model->config().vocab_size, {11, 6}, 2), 2);
}

TEST(LoraTrainer, LogprobsEqualTheServingForwardsAndCheckpointsOrKeptTracesChangeNoGradient) {
  TrainerSetup s;
  s.tiny(std::nullopt, 5);
  s.random_adapter(9);
  const auto seqs = sequences(s.model->config().vocab_size, {13, 7, 66}, 1);
  const auto coef = sft_coef(seqs);
  std::vector<std::unique_ptr<LoraTrainer>> trainers;
  for (int64_t every : {1, 2, 5}) {
    TrainerOptions o;
    o.checkpoint_every = every;
    o.trace_budget_bytes = 0;  // every layer recomputed
    trainers.push_back(LoraTrainer::create(*s.model, *s.adapter, o).value());
    auto lp = trainers.back()->forward(seqs, ForwardPass::kTrain);
    ASSERT_TRUE(lp.ok()) << lp.status().to_string();
    EXPECT_EQ(trainers.back()->traced_layers(), 0);
    if (every == 1) {  // per-token logp against the serving forward's log-softmax, each sequence alone
      // 1e-4 (about 1e-5 of logprobs near -8): batched against separate forwards, f32 sums in
      // another order through five layers; seen 3.2e-5, and 7.3e-5 with this file at -O1, whose
      // adapter draws differ from -O3's in their last bits (a wrong term would be off by > 1e-2).
      const auto want = serving_logprobs(s, seqs);
      for (size_t i = 0; i < seqs.size(); ++i)
        for (size_t t = 1; t < seqs[i].tokens.size(); ++t) EXPECT_NEAR((*lp)[i][t], want[i][t], 1e-4) << i << " " << t;
    }
    ASSERT_TRUE(trainers.back()->backward(coef).ok());
  }
  // Traces kept instead of recomputation: every layer's (the default budget, half the free host
  // memory, holds this tiny model's), then the first layers' only (the smallest doubling budget
  // that keeps some but not all), the rest checkpointed in segments of 2.
  const int64_t layers = s.model->config().num_layers;
  trainers.push_back(LoraTrainer::create(*s.model, *s.adapter).value());
  ASSERT_TRUE(trainers.back()->forward(seqs, ForwardPass::kTrain).ok());
  EXPECT_EQ(trainers.back()->traced_layers(), layers);
  ASSERT_TRUE(trainers.back()->backward(coef).ok());
  int64_t some = 0;
  for (int64_t budget = 1024; budget < (int64_t{1} << 40) && some == 0; budget *= 2) {
    TrainerOptions o;
    o.checkpoint_every = 2;
    o.trace_budget_bytes = budget;
    auto t = LoraTrainer::create(*s.model, *s.adapter, o).value();
    ASSERT_TRUE(t->forward(seqs, ForwardPass::kTrain).ok());
    if (t->traced_layers() == 0) continue;
    some = t->traced_layers();
    ASSERT_LT(some, layers) << "no budget between none and all of the layers' traces";
    ASSERT_TRUE(t->backward(coef).ok());
    trainers.push_back(std::move(t));
  }
  EXPECT_GT(some, 0);
  for (int64_t l = 0; l < s.adapter->num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      if (!s.adapter->factors(l, target).defined()) continue;
      for (size_t k = 1; k < trainers.size(); ++k)
        for (bool is_b : {false, true}) {
          const Tensor& a = is_b ? trainers[0]->grads().factors(l, target).b : trainers[0]->grads().factors(l, target).a;
          const Tensor& b = is_b ? trainers[k]->grads().factors(l, target).b : trainers[k]->grads().factors(l, target).a;
          EXPECT_EQ(testing::max_abs_diff(a.data<float>(), b.data<float>(), a.numel()), 0.0)
              << s.adapter->tensor_name(l, target, is_b) << " trainer " << k << " (checkpoints, traces) differs";
        }
    }
  // A backward with no forward(kTrain) before it has nothing to follow.
  auto fresh = LoraTrainer::create(*s.model, *s.adapter).value();
  auto base = fresh->forward(seqs, ForwardPass::kReference);  // the reference pass keeps nothing
  ASSERT_TRUE(base.ok());
  EXPECT_EQ(fresh->backward(coef).code(), ErrorCode::kFailedPrecondition);
}

// Every factor's gradient, in order.
std::vector<float> flat_grads(LoraTrainer& t) {
  std::vector<float> out;
  LoraAdapter& g = t.grads();
  for (int64_t l = 0; l < g.num_layers(); ++l)
    for (int k = 0; k < kLoraTargetCount; ++k) {
      const LoraFactors& f = g.factors(l, static_cast<LoraTarget>(k));
      if (!f.defined()) continue;
      for (const Tensor* x : {&f.a, &f.b}) out.insert(out.end(), x->data<float>(), x->data<float>() + x->numel());
    }
  return out;
}

// Packing: the examples of a packed sequence are rows of their own, so its log-probabilities and
// gradients are those of the same examples given as separate sequences, bit for bit (the same rows
// in the same order), and each example's log-probabilities are those of its own forward alone.
// The same tokens as one plain sequence give the later examples other log-probabilities: what a
// leak of the GDN and conv state (a GDN-only model) or of attention (an attention-only model)
// across the boundary would bring, so the equalities above would catch one.
TEST(LoraTrainer, PackedExamplesKeepTheirStateAndAttentionApart) {
  struct Case {
    const char* name;
    std::optional<LayerKind> kind;
    int64_t layers;
  };
  for (const Case& c : {Case{"gdn", LayerKind::kLinearAttention, 2}, Case{"attention", LayerKind::kFullAttention, 2},
                        Case{"hybrid", std::nullopt, 4}}) {
    TrainerSetup s;
    s.tiny(c.kind, c.layers);
    s.random_adapter(3);
    const auto examples = sequences(s.model->config().vocab_size, {6, 9, 5}, 1);
    const TrainSequence packed = pack_sequences(std::vector<const TrainSequence*>{&examples[0], &examples[1], &examples[2]});
    ASSERT_EQ(packed.packed, (std::vector<int64_t>{6, 9, 5})) << c.name;
    std::vector<float> packed_coef;
    for (const auto& row : sft_coef(examples)) packed_coef.insert(packed_coef.end(), row.begin(), row.end());

    auto trainer = LoraTrainer::create(*s.model, *s.adapter).value();
    auto separate = trainer->forward(examples, ForwardPass::kTrain);
    ASSERT_TRUE(separate.ok()) << separate.status().to_string();
    ASSERT_TRUE(trainer->backward(sft_coef(examples)).ok());
    const std::vector<float> separate_grads = flat_grads(*trainer);
    ASSERT_TRUE(trainer->zero_grads().ok());
    auto together = trainer->forward({&packed, 1}, ForwardPass::kTrain);
    ASSERT_TRUE(together.ok()) << together.status().to_string();
    ASSERT_TRUE(trainer->backward({packed_coef}).ok());

    std::vector<float> concatenated;
    for (const auto& row : *separate) concatenated.insert(concatenated.end(), row.begin(), row.end());
    EXPECT_EQ((*together)[0], concatenated) << c.name;
    EXPECT_EQ(flat_grads(*trainer), separate_grads) << c.name;

    // Each example alone, and the tokens as one plain sequence, through a forward that keeps nothing.
    TrainSequence plain = packed;
    plain.packed.clear();
    auto joined = trainer->forward({&plain, 1}, ForwardPass::kEval);
    ASSERT_TRUE(joined.ok()) << joined.status().to_string();
    size_t at = 0;
    double leak = 0;
    for (size_t e = 0; e < examples.size(); ++e) {
      auto alone = trainer->forward({&examples[e], 1}, ForwardPass::kEval);
      ASSERT_TRUE(alone.ok()) << alone.status().to_string();
      EXPECT_EQ((*together)[0][at], 0.f) << c.name << ": nothing predicts an example's first token";
      for (size_t t = 1; t < examples[e].tokens.size(); ++t) {
        // 1e-4: one row alone against three in one batch, f32 sums in another order (seen 3.4e-5,
        // hybrid); a leak moves them by more than 1 (printed below).
        EXPECT_NEAR((*together)[0][at + t], (*alone)[0][t], 1e-4) << c.name << " example " << e << " token " << t;
        if (e > 0) leak = std::max(leak, std::fabs(static_cast<double>((*joined)[0][at + t] - (*alone)[0][t])));
      }
      at += examples[e].tokens.size();
    }
    std::printf("%s: the plain sequence moves the later examples' logp by up to %.3g\n", c.name, leak);
    EXPECT_GT(leak, 1e-2) << c.name << ": the earlier examples' context does not reach the later ones, so the test "
                             "could not see a leak";
  }
}

// Gradient accumulation: a forward and backward per sequence, each with its part of the whole
// batch's loss (SFT's mean over all the batch's targets, LossScale), add up in the gradients to
// one forward and backward of the batch. Within 1e-3 of the largest |gradient|: a row alone and
// rows in a batch sum in another f32 order, which this stiff random model magnifies (seen 7.7e-5;
// the batch reversed, same rows, 2.6e-7); each part's own mean instead is off by far more (> 0.1).
// The loss within 1e-6.
TEST(LoraTrainer, BackwardsOfMicroBatchesAddUpToTheBackwardOfTheirBatch) {
  TrainerSetup s;
  s.tiny(std::nullopt);
  s.random_adapter(6);
  const auto seqs = sequences(s.model->config().vocab_size, {11, 6, 9, 14}, 2);
  auto trainer = LoraTrainer::create(*s.model, *s.adapter).value();
  auto lp = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_TRUE(lp.ok()) << lp.status().to_string();
  const TokenLoss whole = sft_loss(seqs, *lp, 0.f).value();
  ASSERT_TRUE(trainer->backward(whole.coef).ok());
  const std::vector<float> batch = flat_grads(*trainer);
  double biggest = 0;
  for (float g : batch) biggest = std::max(biggest, std::fabs(static_cast<double>(g)));
  // The largest difference from the batch's gradients of the parts' accumulated with `scale`.
  auto accumulate = [&](const std::optional<LossScale>& scale, double* loss) {
    EXPECT_TRUE(trainer->zero_grads().ok());
    *loss = 0;
    for (const TrainSequence& q : seqs) {
      auto l = trainer->forward({&q, 1}, ForwardPass::kTrain);
      EXPECT_TRUE(l.ok()) << l.status().to_string();
      const TokenLoss part = sft_loss({&q, 1}, *l, 0.f, scale).value();
      *loss += part.loss;
      EXPECT_TRUE(trainer->backward(part.coef).ok());
    }
    const std::vector<float> g = flat_grads(*trainer);
    double worst = 0;
    for (size_t i = 0; i < batch.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(g[i]) - batch[i]));
    return worst;
  };
  double loss = 0, own_loss = 0;
  const double worst = accumulate(sft_loss_scale(seqs), &loss);
  const double own = accumulate(std::nullopt, &own_loss);
  std::printf("accumulated gradients differ from the batch's by %.3g of the largest (%.3g); each part's own mean by %.3g\n",
              worst / biggest, biggest, own / biggest);
  EXPECT_NEAR(loss, whole.loss, 1e-6 * whole.loss);
  EXPECT_LE(worst, 1e-3 * biggest);
  EXPECT_GT(own, 0.1 * biggest);
}

TEST(LoraTrainer, RefusesBadInputsNamingThem) {
  TrainerSetup s;
  s.tiny(LayerKind::kFullAttention, 1);
  s.random_adapter(1);
  TrainerOptions bad;
  bad.checkpoint_every = 0;
  EXPECT_EQ(LoraTrainer::create(*s.model, *s.adapter, bad).status().code(), ErrorCode::kInvalidArgument);
  bad.checkpoint_every = 1;
  bad.trace_budget_bytes = -1;
  const auto neg = LoraTrainer::create(*s.model, *s.adapter, bad);
  ASSERT_FALSE(neg.ok());
  EXPECT_NE(neg.status().message().find("trace_budget_bytes is -1"), std::string::npos) << neg.status().to_string();
  auto trainer = LoraTrainer::create(*s.model, *s.adapter).value();
  auto seqs = sequences(s.model->config().vocab_size, {5, 4}, 1);
  seqs[1].tokens.resize(1), seqs[1].roles.resize(1);
  auto r = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sequence 1 has 1 tokens"), std::string::npos) << r.status().to_string();
  seqs = sequences(s.model->config().vocab_size, {5, 4}, 1);
  seqs[0].tokens[2] = static_cast<int32_t>(s.model->config().vocab_size);
  r = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sequence 0 token 2"), std::string::npos) << r.status().to_string();
  seqs = sequences(s.model->config().vocab_size, {5, 4}, 1);
  ASSERT_TRUE(trainer->forward(seqs, ForwardPass::kTrain).ok());
  Status st = trainer->backward({std::vector<float>(5, 0.f), std::vector<float>(3, 0.f)});
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("sequence 1 has 3 coefficients for 4 tokens"), std::string::npos) << st.to_string();
  seqs = sequences(s.model->config().vocab_size, {5, 4}, 1);
  seqs[0].packed = {2, 2};
  r = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sequence 0: its packed examples hold 4 tokens, the sequence 5"), std::string::npos)
      << r.status().to_string();
  seqs[0].packed = {4, 1};
  r = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("packed example 1 has 1 tokens"), std::string::npos) << r.status().to_string();
}

// Against transformers + peft: the mean cross-entropy over the marked tokens of two sequences,
// gradients of the reference adapter's 50 factors computed in float64 (spec: within 1e-4 relative).
TEST(LoraTrainer, GradientsMatchTransformersAndPeft) {
  constexpr double kRel = 1e-4;  // of each factor's largest |gradient|
  TrainerSetup s;
  s.load(fixture("reference/gqa_untied"));
  auto ad = LoraAdapter::load(fixture("lora_reference/gqa_untied"), s.model->config(), s.backend->storage());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
  s.adapter.emplace(std::move(ad).value());
  auto ref = Checkpoint::open_file(fixture("lora_grad_reference/gqa_untied/grad_reference.safetensors")).value();
  std::vector<TrainSequence> seqs;
  for (int i = 0; i < 2; ++i) {
    const Tensor& ids = ref.find("ids_" + std::to_string(i))->tensor;
    const Tensor& tg = ref.find("targets_" + std::to_string(i))->tensor;
    TrainSequence seq;
    for (int64_t t = 0; t < ids.numel(); ++t) {
      seq.tokens.push_back(ids.data<int32_t>()[t]);
      seq.roles.push_back(tg.data<int32_t>()[t] ? TokenRole::kTarget : TokenRole::kContext);
    }
    seqs.push_back(std::move(seq));
  }
  auto trainer = LoraTrainer::create(*s.model, *s.adapter).value();
  const auto coef = sft_coef(seqs);
  auto lp = trainer->forward(seqs, ForwardPass::kTrain);
  ASSERT_TRUE(lp.ok()) << lp.status().to_string();
  double loss = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t t = 1; t < seqs[i].tokens.size(); ++t) loss += coef[i][t] * (*lp)[i][t];
  EXPECT_NEAR(loss, ref.find("loss")->tensor.data<float>()[0], 1e-5 * std::fabs(loss));
  Status st = trainer->backward(coef);
  ASSERT_TRUE(st.ok()) << st.to_string();
  int compared = 0;
  for (int64_t l = 0; l < s.adapter->num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      if (!s.adapter->factors(l, target).defined()) continue;
      for (bool is_b : {false, true}) {
        const std::string name = s.adapter->tensor_name(l, target, is_b);
        const TensorEntry* want = ref.find(name);
        ASSERT_NE(want, nullptr) << name;
        const Tensor& got = is_b ? trainer->grads().factors(l, target).b : trainer->grads().factors(l, target).a;
        ASSERT_EQ(got.shape(), want->tensor.shape()) << name;
        double scale = 0;
        for (int64_t i = 0; i < got.numel(); ++i) scale = std::max(scale, std::fabs(double(want->tensor.data<float>()[i])));
        const double err = testing::max_abs_diff(got.data<float>(), want->tensor.data<float>(), got.numel());
        EXPECT_LE(err, kRel * scale) << name << ": max |kiln - peft| " << err << ", max |peft| " << scale;
        ++compared;
      }
    }
  EXPECT_EQ(compared, 50);
}

}  // namespace
}  // namespace kiln
