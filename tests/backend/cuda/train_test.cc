// LoRA training on the CUDA backend, end to end through the real LoraTrainer and run_training:
// gradients against transformers + peft (f32 fixture: every op runs in f32 on the device), hybrid
// models against the CPU trainer (f32, and bf16 with its stated tolerance: the device rounds GEMM
// activations to bf16), one optimizer step against the CPU's step from the same initial adapter,
// GRPO's and OPD's gradients against the CPU trainer's, and a run that learns while every
// host-fallback counter stays at zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "backend/fallback.h"
#include "cuda_test_util.h"
#include "train/train_sequences.h"
#include "model/init.h"
#include "model/tiny_checkpoint.h"
#include "model/qwen35.h"
#include "model/random_adapter.h"
#include "model/safetensors.h"
#include "train/lora_trainer.h"
#include "train/token_loss.h"
#include "train/train_run.h"

namespace kiln {
namespace {

using testing::to_host;

std::string fixture(const std::string& rel) { return std::string(KILN_FIXTURES_DIR) + "/" + rel; }

std::unique_ptr<Qwen35Model> load_model(const std::string& dir, Backend& be) {
  auto m = Qwen35Model::load(dir, be);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(m).value() : nullptr;
}

// The f32 hybrid tiny checkpoint of `seed`, loaded on the device and on the CPU.
std::pair<std::unique_ptr<Qwen35Model>, std::unique_ptr<Qwen35Model>> f32_tiny_on_both(uint64_t seed, Backend& be,
                                                                                       Backend& cpu) {
  const std::string dir = testing::tiny_checkpoint("cuda-train", seed, DType::kF32);
  auto on_device = load_model(dir, be);
  auto on_cpu = load_model(dir, cpu);
  std::filesystem::remove_all(dir);
  return {std::move(on_device), std::move(on_cpu)};
}

// The f32 fixture `rel` (config.json + model.safetensors) with every tensor rounded to bf16.
std::string bf16_copy(const std::string& rel) {
  namespace fs = std::filesystem;
  const std::string dir = testing::temp_dir("cuda-train-bf16");
  fs::copy_file(fixture(rel) + "/config.json", dir + "/config.json");
  auto ck = Checkpoint::open_file(fixture(rel) + "/model.safetensors");
  EXPECT_TRUE(ck.ok()) << ck.status().to_string();
  std::vector<std::pair<std::string, Tensor>> out;
  for (const auto& [name, e] : ck->tensors()) {
    EXPECT_EQ(e.tensor.dtype(), DType::kF32) << name;
    Tensor b = Tensor::empty(e.tensor.shape(), DType::kBF16);
    f32_to_bf16(e.tensor.data<float>(), b.data<uint16_t>(), static_cast<size_t>(e.tensor.numel()));
    out.emplace_back(name, b);
  }
  EXPECT_TRUE(write_safetensors(dir + "/model.safetensors", out).ok());
  return dir;
}

std::vector<TrainSequence> sequences(int64_t vocab, std::vector<int64_t> lengths, int64_t first_target) {
  return testing::random_sequences(vocab, lengths, first_target, 777u);
}
using testing::sft_coef;

// Every target, rank 4, B drawn non-zero so that the gradients of A are too (random_adapter.h).
using testing::random_adapter;

// How far `got` is from `want` over every factor: the L2 norm of the difference of all factors
// concatenated over that of `want` (the gradient direction as a whole), and the worst factor's
// own max|got - want| / max|want| (printed with the next worst, by name: which layer and
// projection tells which backward op disagrees).
struct AdapterError {
  double l2 = 0, worst_factor = 0;
  int factors = 0;
};
AdapterError adapter_error(Backend& got_be, const LoraAdapter& got, Backend& want_be, const LoraAdapter& want) {
  AdapterError r;
  double diff2 = 0, want2 = 0;
  std::vector<std::pair<double, std::string>> errors;
  for (int64_t l = 0; l < want.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      if (!want.factors(l, target).defined()) continue;
      for (bool is_b : {false, true}) {
        const Tensor& g = is_b ? got.factors(l, target).b : got.factors(l, target).a;
        const Tensor& w = is_b ? want.factors(l, target).b : want.factors(l, target).a;
        const Tensor gh = to_host(got_be, g), wh = to_host(want_be, w);
        for (int64_t i = 0; i < wh.numel(); ++i) {
          const double d = double(gh.data<float>()[i]) - wh.data<float>()[i];
          diff2 += d * d;
          want2 += double(wh.data<float>()[i]) * wh.data<float>()[i];
        }
        const double e = testing::rel_error(gh, wh);
        EXPECT_TRUE(std::isfinite(e)) << want.tensor_name(l, target, is_b);
        r.worst_factor = std::max(r.worst_factor, e);
        errors.emplace_back(e, want.tensor_name(l, target, is_b));
        ++r.factors;
      }
    }
  r.l2 = std::sqrt(diff2 / std::max(want2, 1e-300));
  std::sort(errors.rbegin(), errors.rend());
  for (size_t i = 0; i < errors.size() && i < 3; ++i) std::printf("  %-64s %.3g\n", errors[i].second.c_str(), errors[i].first);
  return r;
}

// The gradients of the mean cross-entropy of `seqs` on `be` (the adapter given as on that backend).
std::unique_ptr<LoraTrainer> gradients(Qwen35Model& m, LoraAdapter& ad, const std::vector<TrainSequence>& seqs,
                                       double* loss) {
  auto trainer = LoraTrainer::create(m, ad);
  EXPECT_TRUE(trainer.ok()) << trainer.status().to_string();
  if (!trainer.ok()) return nullptr;
  const auto coef = sft_coef(seqs);
  auto lp = (*trainer)->forward(seqs, ForwardPass::kTrain);
  EXPECT_TRUE(lp.ok()) << lp.status().to_string();
  if (!lp.ok()) return nullptr;
  *loss = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t t = 1; t < seqs[i].tokens.size(); ++t) *loss += coef[i][t] * (*lp)[i][t];
  Status st = (*trainer)->backward(coef);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return st.ok() ? std::move(trainer).value() : nullptr;
}

// Against transformers + peft on the f32 fixture: with f32 weights every op of the device's
// backward runs in f32, so the CPU's bound holds (1e-4 of each factor's largest |gradient|).
TEST(CudaTraining, GradientsMatchTransformersAndPeft) {
  KILN_CUDA_OR_SKIP(be);
  constexpr double kRel = 1e-4;
  auto model = load_model(fixture("reference/gqa_untied"), *be);
  ASSERT_TRUE(model);
  auto ad = LoraAdapter::load(fixture("lora_reference/gqa_untied"), model->config(), be->storage());
  ASSERT_TRUE(ad.ok()) << ad.status().to_string();
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
  double loss = 0;
  auto trainer = gradients(*model, *ad, seqs, &loss);
  ASSERT_TRUE(trainer);
  EXPECT_NEAR(loss, ref.find("loss")->tensor.data<float>()[0], 1e-5 * std::fabs(loss));
  int compared = 0;
  for (int64_t l = 0; l < ad->num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      if (!ad->factors(l, target).defined()) continue;
      for (bool is_b : {false, true}) {
        const std::string name = ad->tensor_name(l, target, is_b);
        const TensorEntry* want = ref.find(name);
        ASSERT_NE(want, nullptr) << name;
        const Tensor got = to_host(*be, is_b ? trainer->grads().factors(l, target).b : trainer->grads().factors(l, target).a);
        ASSERT_EQ(got.shape(), want->tensor.shape()) << name;
        EXPECT_LE(testing::rel_error(got, want->tensor), kRel) << name;
        ++compared;
      }
    }
  EXPECT_EQ(compared, 50);
}

// Against the CPU trainer on the same checkpoint and adapter, several ragged sequences crossing a
// GDN chunk boundary, compared over the whole gradient (L2): the hybrid tiny model (GDN +
// attention), every op in f32 on both sides. Per factor that comparison is ill-conditioned:
// kiln's random init has unit gain per projection (the HF fixtures' 0.02), and some layer-0
// factors' gradients are sums over tokens that nearly cancel, so f32 rounding alone moved them by
// 2.4e-3 of their size on the H200 and the whole gradient by 1.4e-3 (the worst factors are
// printed): bound 3e-3.
TEST(CudaTraining, F32HybridGradientsMatchTheCpuReference) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu").value();
  auto [gm, cm] = f32_tiny_on_both(11, *be, *cpu);
  ASSERT_TRUE(gm && cm);
  LoraAdapter gad = random_adapter(gm->config(), be->storage(), 3);
  LoraAdapter cad = random_adapter(cm->config(), cpu->storage(), 3);
  const auto seqs = sequences(gm->config().vocab_size, {70, 9, 131}, 4);
  double gloss = 0, closs = 0;
  auto gt = gradients(*gm, gad, seqs, &gloss);
  auto ct = gradients(*cm, cad, seqs, &closs);
  ASSERT_TRUE(gt && ct);
  EXPECT_NEAR(gloss, closs, 1e-5 * std::fabs(closs));
  const AdapterError e = adapter_error(*be, gt->grads(), *cpu, ct->grads());
  EXPECT_EQ(e.factors, 50);
  EXPECT_LE(e.l2, 3e-3);
  std::printf("f32 hybrid gradients: L2 error %.3g, worst factor %.3g over %d factors\n", e.l2, e.worst_factor, e.factors);
}

// bf16 weights: the fixture's f32 weights rounded to bf16 (HF's init), an adapter as training
// starts it (B = 0: the forward is the base model's, only B has a gradient), three ragged rows.
// The gradient of a random-weight model is a small residue of near-uniform output distributions,
// so it is sensitive to any rounding: on the CPU, rounding the weights to bf16 alone moves it by
// 14-21% (L2) for single rows of 16-131 tokens and by 106% for these three rows. The device also
// rounds the activations to bf16 in every GEMM (the serving contract): its gradient may differ
// from the CPU's on the same bf16 weights by no more than twice what the weight rounding itself
// moves the CPU's gradient (measured on the H200: 0.15 against 1.06, so the bound is loose; the
// f32 tests above, where both sides compute the same function, are the tight ones).
TEST(CudaTraining, Bf16HybridGradientsMatchTheCpuReference) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu").value();
  const std::string dir = bf16_copy("reference/gqa_untied");
  auto g16 = load_model(dir, *be);
  auto c16 = load_model(dir, *cpu);
  auto c32 = load_model(fixture("reference/gqa_untied"), *cpu);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(g16 && c16 && c32);
  LoraConfig cfg;
  cfg.rank = 8;
  cfg.alpha = 16;
  for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
  LoraAdapter ga = LoraAdapter::init(cfg, g16->config(), 4, be->storage()).value();
  LoraAdapter ca = LoraAdapter::init(cfg, c16->config(), 4, cpu->storage()).value();
  LoraAdapter fa = LoraAdapter::init(cfg, c32->config(), 4, cpu->storage()).value();
  const auto seqs = sequences(g16->config().vocab_size, {70, 9, 131}, 4);
  double l_g16 = 0, l_c16 = 0, l_c32 = 0;
  auto t_g16 = gradients(*g16, ga, seqs, &l_g16);
  auto t_c16 = gradients(*c16, ca, seqs, &l_c16);
  auto t_c32 = gradients(*c32, fa, seqs, &l_c32);
  ASSERT_TRUE(t_g16 && t_c16 && t_c32);
  EXPECT_NEAR(l_g16, l_c16, 1e-2 * std::fabs(l_c16));
  const AdapterError rounding = adapter_error(*cpu, t_c16->grads(), *cpu, t_c32->grads());
  const AdapterError e = adapter_error(*be, t_g16->grads(), *cpu, t_c16->grads());
  EXPECT_EQ(e.factors, 50);
  EXPECT_GT(rounding.l2, 0.0);
  EXPECT_LE(e.l2, 2 * rounding.l2);
  std::printf("bf16 gradients (B = 0): cuda vs cpu L2 %.3g (worst factor %.3g); weight rounding moves the cpu's by %.3g; "
              "loss cuda %.6f cpu %.6f f32 %.6f\n", e.l2, e.worst_factor, rounding.l2, l_g16, l_c16, l_c32);
}

// Two groups of three completions (ragged, crossing a GDN chunk) with distinct rewards, each
// carrying behaviour log-probabilities (the CPU's own log-probabilities less 0, 0.1 or 0.3 by
// token: rho of 1, 1.105 and 1.35, so the clip at 1 +- 0.2 acts on some tokens, and no token's rho
// lies within 0.07 of a clip edge in log space, where f32 differences could flip it) and teacher
// log-probabilities (the CPU's plus 0.4 sin(t)). Both backends get the very same groups.
std::vector<GrpoGroup> online_groups(LoraTrainer& cpu_trainer, int64_t vocab) {
  const auto seqs = sequences(vocab, {70, 9, 131, 40, 66, 20}, 4);
  auto logp = cpu_trainer.forward(seqs, ForwardPass::kEval);
  EXPECT_TRUE(logp.ok()) << logp.status().to_string();
  const double rewards[] = {1.0, 0.0, 0.5, 0.25, 1.0, 0.0};
  std::vector<GrpoGroup> groups(2);
  for (size_t i = 0; i < seqs.size(); ++i) {
    GrpoCompletion c;
    c.sequence = seqs[i];
    c.reward = rewards[i];
    for (size_t t = 0; t < seqs[i].tokens.size(); ++t) {
      const float lp = logp.ok() ? (*logp)[i][t] : 0.f;
      c.behavior_logp.push_back(lp - 0.1f * static_cast<float>((t % 3 == 2) ? 3 : t % 3));
      c.teacher_logp.push_back(lp + 0.4f * std::sin(static_cast<float>(t)));
    }
    groups[i / 3].completions.push_back(std::move(c));
  }
  return groups;
}

// GRPO (Dr. GRPO advantages, clipped ratio, the k3 KL against the model without the adapter) or
// OPD over `groups` on `m`: the loss, and the trainer holding its gradients.
std::unique_ptr<LoraTrainer> online_gradients(Qwen35Model& m, LoraAdapter& ad, const std::vector<GrpoGroup>& groups,
                                              bool opd, double* loss) {
  auto trainer = LoraTrainer::create(m, ad);
  EXPECT_TRUE(trainer.ok()) << trainer.status().to_string();
  if (!trainer.ok()) return nullptr;
  std::vector<TrainSequence> seqs;
  for (const GrpoGroup& g : groups)
    for (const GrpoCompletion& c : g.completions) seqs.push_back(c.sequence);
  TokenLogprobs ref;
  if (!opd) {
    auto r = (*trainer)->forward(seqs, ForwardPass::kReference);
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    if (!r.ok()) return nullptr;
    ref = std::move(*r);
  }
  auto lp = (*trainer)->forward(seqs, ForwardPass::kTrain);
  EXPECT_TRUE(lp.ok()) << lp.status().to_string();
  if (!lp.ok()) return nullptr;
  GrpoLossOptions g;
  g.kl = KlEstimator::kK3;
  Result<TokenLoss> l = opd ? opd_loss(groups, *lp, OpdLossOptions{}) : grpo_loss(groups, *lp, ref, g);
  EXPECT_TRUE(l.ok()) << l.status().to_string();
  if (!l.ok()) return nullptr;
  *loss = l->loss;
  Status st = (*trainer)->backward(l->coef);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return st.ok() ? std::move(trainer).value() : nullptr;
}

// GRPO's and OPD's gradients on the device against the CPU trainer's, on the f32 hybrid tiny
// model with the same adapter (B non-zero) and the same groups, compared over the whole gradient
// (L2) as the SFT test above. Their coefficients are SFT's reweighted per token by signed
// advantages, which sum to about zero over a group, so the gradient is a difference of larger
// sums and f32 rounding weighs more in it than in SFT's. On an H100 the L2 errors were 2.1e-4
// (GRPO) and 6.5e-4 (OPD): bound 3e-3, SFT's, the figure printed. The losses agree within 1e-3
// absolute (they too are sums of signed terms near zero).
TEST(CudaTraining, GrpoAndOpdGradientsMatchTheCpuReference) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu").value();
  auto [gm, cm] = f32_tiny_on_both(11, *be, *cpu);
  ASSERT_TRUE(gm && cm);
  LoraAdapter probe = random_adapter(cm->config(), cpu->storage(), 3);
  auto probe_trainer = LoraTrainer::create(*cm, probe);
  ASSERT_TRUE(probe_trainer.ok()) << probe_trainer.status().to_string();
  const std::vector<GrpoGroup> groups = online_groups(**probe_trainer, cm->config().vocab_size);
  for (bool opd : {false, true}) {
    LoraAdapter gad = random_adapter(gm->config(), be->storage(), 3);
    LoraAdapter cad = random_adapter(cm->config(), cpu->storage(), 3);
    double gloss = 0, closs = 0;
    auto gt = online_gradients(*gm, gad, groups, opd, &gloss);
    auto ct = online_gradients(*cm, cad, groups, opd, &closs);
    ASSERT_TRUE(gt && ct) << (opd ? "opd" : "grpo");
    EXPECT_NEAR(gloss, closs, 1e-3) << (opd ? "opd" : "grpo");
    const AdapterError e = adapter_error(*be, gt->grads(), *cpu, ct->grads());
    EXPECT_EQ(e.factors, 50);
    EXPECT_LE(e.l2, 3e-3) << (opd ? "opd" : "grpo");
    std::printf("%s gradients: loss cuda %.6f cpu %.6f; L2 error %.3g, worst factor %.3g over %d factors\n",
                opd ? "opd" : "grpo", gloss, closs, e.l2, e.worst_factor, e.factors);
  }
}

TrainSpec sgd_spec(const std::vector<TrainSequence>& seqs, int64_t epochs) {
  TrainSpec spec;
  spec.lora.rank = 8;
  spec.lora.alpha = 16;
  for (int t = 0; t < kLoraTargetCount; ++t) spec.lora.targets.push_back(static_cast<LoraTarget>(t));
  spec.optimizer = OptimizerKind::kSgd;
  spec.hyper.lr = 0.05f;
  spec.epochs = epochs;
  spec.batch_sequences = static_cast<int64_t>(seqs.size());
  spec.seed = 21;
  spec.sft = seqs;
  return spec;
}

// One SGD step from the same initial adapter on both backends (f32 checkpoint: every op in f32):
// the adapters after it agree within 1e-3 (L2, as above; B starts at zero, so B after the step
// is -lr times its gradient: the step itself is compared), and the loss of a second step (same
// batch) is lower than the first on the device.
TEST(CudaTraining, OneStepMatchesTheCpuReference) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = create_backend("cpu").value();
  auto [gm, cm] = f32_tiny_on_both(5, *be, *cpu);
  ASSERT_TRUE(gm && cm);
  const auto seqs = sequences(gm->config().vocab_size, {24, 40}, 6);
  std::atomic<bool> cancel{false};
  auto g1 = run_training(*gm, sgd_spec(seqs, 1), {}, cancel);
  auto c1 = run_training(*cm, sgd_spec(seqs, 1), {}, cancel);
  ASSERT_TRUE(g1.ok()) << g1.status().to_string();
  ASSERT_TRUE(c1.ok()) << c1.status().to_string();
  EXPECT_NEAR(g1->losses[0], c1->losses[0], 1e-5 * std::fabs(c1->losses[0]));
  // The global gradient norm, reduced on the device, is the CPU's (and above the default
  // max_grad_norm of 1, so the step compared below is a clipped one).
  EXPECT_NEAR(g1->grad_norms[0], c1->grad_norms[0], 1e-4 * c1->grad_norms[0]);
  EXPECT_GT(c1->grad_norms[0], 1.0);
  const AdapterError e = adapter_error(*be, g1->adapter, *cpu, c1->adapter);
  EXPECT_EQ(e.factors, 50);
  EXPECT_LE(e.l2, 1e-3) << "adapter after one SGD step";
  std::printf("one SGD step: adapter L2 error %.3g, worst factor %.3g\n", e.l2, e.worst_factor);
  auto g2 = run_training(*gm, sgd_spec(seqs, 2), {}, cancel);
  ASSERT_TRUE(g2.ok()) << g2.status().to_string();
  ASSERT_EQ(g2->losses.size(), 2u);
  EXPECT_LT(g2->losses[1], g2->losses[0]);
}

// A run on the bf16 tiny model with Muon (the default optimizer): 40 steps drive the loss down at
// least 5x, and no op of forward, backward or optimizer ran on the host. (30 steps gave 5x until
// d17f2da changed the GDN backward's summation order, then 4.82x, deterministically, on both its
// binaries: Muon's orthogonalised steps carry such last-bit differences into the trajectory, so
// the bound is on a longer run, not on the rounding of one revision.)
TEST(CudaTraining, StepKeepsHostFallbackAtZero) {
  KILN_CUDA_OR_SKIP(be);
  FallbackCounters::global().reset();
  const std::string dir = testing::tiny_checkpoint("cuda-train", 9, DType::kBF16);
  auto gm = load_model(dir, *be);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(gm);
  const auto seqs = sequences(gm->config().vocab_size, {12, 12, 12, 12}, 4);
  TrainSpec spec = sgd_spec(seqs, 40);
  spec.optimizer = OptimizerKind::kMuon;
  spec.hyper = OptimizerHyper{};
  spec.hyper.lr = 3e-3f;
  std::atomic<bool> cancel{false};
  auto r = run_training(*gm, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->losses.size(), 40u);
  std::printf("bf16 Muon: loss %.6f, after 30 steps %.6f (%.2fx), after 40 %.6f (%.2fx)\n", r->losses.front(),
              r->losses[29], r->losses.front() / r->losses[29], r->losses.back(), r->losses.front() / r->losses.back());
  EXPECT_LT(r->losses.back() * 5, r->losses.front()) << "first " << r->losses.front() << " last " << r->losses.back();
  EXPECT_EQ(FallbackCounters::global().total("cuda"), 0u);
  EXPECT_EQ(FallbackCounters::global().total("cpu"), 0u);
}

// The controls on the device: packed sequences (the examples rows of their own) train as the
// same examples unpacked, and one step of two micro-batches as one batch of both, within the f32
// rounding of a different batch composition (1e-5 of the loss, 1e-4 of the gradient norm), on the
// f32 tiny checkpoint.
TEST(CudaTraining, PackedAndAccumulatedStepsMatchTheirPlainSteps) {
  KILN_CUDA_OR_SKIP(be);
  const std::string dir = testing::tiny_checkpoint("cuda-train", 5, DType::kF32);
  auto gm = load_model(dir, *be);
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(gm);
  const auto seqs = sequences(gm->config().vocab_size, {20, 20, 20, 20}, 6);
  std::atomic<bool> cancel{false};
  TrainSpec plain = sgd_spec(seqs, 1);
  plain.batch_sequences = 2;
  TrainSpec packed = plain;
  packed.batch_sequences = 1;
  packed.pack_tokens = 40;
  TrainSpec accumulated = plain;
  accumulated.batch_sequences = 1;
  accumulated.accumulation_steps = 2;
  auto p = run_training(*gm, plain, {}, cancel), k = run_training(*gm, packed, {}, cancel),
       a = run_training(*gm, accumulated, {}, cancel);
  ASSERT_TRUE(p.ok() && k.ok() && a.ok()) << p.status().to_string() << k.status().to_string() << a.status().to_string();
  ASSERT_EQ(p->losses.size(), 2u);
  ASSERT_EQ(k->losses.size(), 2u);
  ASSERT_EQ(a->losses.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_NEAR(k->losses[i], p->losses[i], 1e-5 * p->losses[i]) << "packed, step " << i + 1;
    EXPECT_NEAR(a->losses[i], p->losses[i], 1e-5 * p->losses[i]) << "accumulated, step " << i + 1;
    EXPECT_NEAR(k->grad_norms[i], p->grad_norms[i], 1e-4 * p->grad_norms[i]) << "packed, step " << i + 1;
    EXPECT_NEAR(a->grad_norms[i], p->grad_norms[i], 1e-4 * p->grad_norms[i]) << "accumulated, step " << i + 1;
  }
  std::printf("controls on cuda: loss %.6f / packed %.6f / accumulated %.6f; norm %.5f / %.5f / %.5f\n",
              p->losses[1], k->losses[1], a->losses[1], p->grad_norms[1], k->grad_norms[1], a->grad_norms[1]);
}

}  // namespace
}  // namespace kiln
