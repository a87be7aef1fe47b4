// run_training: the loop's contract with a stand-in trainer (every sequence once per epoch in
// batches, the same seed giving the same adapter bit for bit, cancellation between steps, the
// step runner, GRPO's reference pass and dropped groups, continuing from a base adapter) and the
// training controls (the gradient norm reported and clipped, each step's scheduled rate,
// accumulated micro-batches stepping as one batch, the held-out loss, packed sequences).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <set>

#include "backend/registry.h"
#include "model/init.h"
#include "model/qwen35.h"
#include "test_util.h"
#include "train/train_run.h"

namespace kiln {
namespace {

// A random-weight `tiny` checkpoint (vocab 512, 4 layers: 3 GDN + 1 attention), made once.
struct TinyModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Qwen35Model> model;
};
TinyModel& tiny() {
  static TinyModel* t = [] {
    auto* m = new TinyModel;
    m->backend = std::move(create_backend("cpu").value());
    const std::string dir = testing::temp_dir("train-run");
    EXPECT_TRUE(write_random_checkpoint(preset_config("tiny").value(), dir, {.seed = 3, .quiet = true}).ok());
    auto loaded = Qwen35Model::load(dir, *m->backend);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (loaded.ok()) m->model = std::move(loaded).value();
    std::filesystem::remove_all(dir);
    return m;
  }();
  return *t;
}

TrainSequence sequence(std::vector<int32_t> prompt, const std::vector<int32_t>& answer) {
  TrainSequence s;
  s.roles.assign(prompt.size(), TokenRole::kContext);
  s.tokens = std::move(prompt);
  for (int32_t t : answer) {
    s.tokens.push_back(t);
    s.roles.push_back(TokenRole::kTarget);
  }
  return s;
}

// Every factor's bytes, in order: two adapters are equal when these are.
template <typename Adapter>  // LoraAdapter (on the CPU, host memory) or HostLoraAdapter
std::vector<float> flatten(const Adapter& a) {
  std::vector<float> out;
  for (int64_t l = 0; l < a.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      for (const Tensor* x : {&f.a, &f.b}) out.insert(out.end(), x->data<float>(), x->data<float>() + x->numel());
    }
  return out;
}

// ---------------------------------------------------------------- the loop, with a stand-in trainer

// logp[s][t] = -c * sum_i (theta_i - tokens[t] / 512)^2 - 0.5 over every factor element theta_i
// (with the adapter; -1 without): smooth in the factors, so the optimizer has a real gradient.
// Records what each forward saw.
struct Calls {
  std::vector<std::vector<int32_t>> batches;  // first token of each sequence, per kTrain forward
  std::vector<ForwardPass> passes;            // per forward, in order
  std::vector<std::vector<std::vector<float>>> coefs;  // per backward: dLoss/dlogp per sequence and token
  std::vector<std::vector<std::vector<float>>> logps;  // per kTrain forward: what it returned
  std::vector<std::vector<int32_t>> eval_batches;      // first token of each sequence, per kEval forward
  std::vector<std::vector<std::vector<int64_t>>> packed;  // per kTrain forward: each sequence's packed lengths
};

class FakeTrainer final : public LoraTrainer {
 public:
  static constexpr double kC = 1e-4;
  FakeTrainer(LoraAdapter& ad, LoraAdapter grads, Calls* calls) : ad_(ad), grads_(std::move(grads)), calls_(calls) {}

  Result<std::vector<std::vector<float>>> forward(std::span<const TrainSequence> seqs, ForwardPass pass) override {
    calls_->passes.push_back(pass);
    const bool with_adapter = pass != ForwardPass::kReference;
    std::vector<std::vector<float>> out;
    std::vector<int32_t> firsts;
    const std::vector<float> theta = flatten(ad_);
    for (const auto& s : seqs) {
      firsts.push_back(s.tokens[0]);
      std::vector<float> row(s.tokens.size(), 0.f);
      for (size_t t = 1; t < s.tokens.size(); ++t) {
        double sum = 0;
        for (float x : theta) sum += (x - s.tokens[t] / 512.0) * (x - s.tokens[t] / 512.0);
        row[t] = with_adapter ? static_cast<float>(-kC * sum - 0.5) : -1.f;
      }
      out.push_back(row);
    }
    if (pass == ForwardPass::kTrain) {
      calls_->batches.push_back(firsts);
      calls_->logps.push_back(out);
      calls_->packed.emplace_back();
      for (const auto& q : seqs) calls_->packed.back().push_back(q.packed);
      last_ = {seqs.begin(), seqs.end()};
    }
    if (pass == ForwardPass::kEval) calls_->eval_batches.push_back(firsts);
    return out;
  }
  Status backward(const std::vector<std::vector<float>>& coef) override {
    calls_->coefs.push_back(coef);
    for (int64_t l = 0; l < ad_.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        const LoraFactors& f = ad_.factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        const LoraFactors& g = grads_.factors(l, static_cast<LoraTarget>(t));
        for (auto [p, d] : {std::pair{&f.a, &g.a}, std::pair{&f.b, &g.b}})
          for (int64_t i = 0; i < p->numel(); ++i) {
            double acc = 0;
            for (size_t s = 0; s < last_.size(); ++s)
              for (size_t k = 1; k < last_[s].tokens.size(); ++k)
                acc += coef[s][k] * -2 * kC * (p->data<float>()[i] - last_[s].tokens[k] / 512.0);
            d->data<float>()[i] += static_cast<float>(acc);
          }
      }
    return {};
  }
  LoraAdapter& grads() override { return grads_; }
  int64_t traced_layers() const override { return 0; }
  Status zero_grads() override {
    for (int64_t l = 0; l < grads_.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        const LoraFactors& g = grads_.factors(l, static_cast<LoraTarget>(t));
        if (!g.defined()) continue;
        std::memset(g.a.raw(), 0, g.a.nbytes());
        std::memset(g.b.raw(), 0, g.b.nbytes());
      }
    return {};
  }

 private:
  LoraAdapter& ad_;
  LoraAdapter grads_;
  Calls* calls_;
  std::vector<TrainSequence> last_;
};

TrainSpec fake_spec(Calls* calls) {
  TrainSpec spec;
  spec.lora.rank = 2;
  spec.lora.alpha = 4;
  spec.lora.targets = {LoraTarget::kQProj, LoraTarget::kInProjZ, LoraTarget::kDownProj};
  spec.optimizer = OptimizerKind::kAdamW;
  spec.hyper.lr = 1e-2f;
  spec.seed = 11;
  spec.make_trainer = [calls](Qwen35Model& m, LoraAdapter& ad) -> Result<std::unique_ptr<LoraTrainer>> {
    KILN_ASSIGN_OR_RETURN(LoraAdapter g, LoraAdapter::zeros_like(ad, m.backend().storage()));
    return std::unique_ptr<LoraTrainer>(new FakeTrainer(ad, std::move(g), calls));
  };
  for (int32_t i = 0; i < 5; ++i) spec.sft.push_back(sequence({i, 100 + i}, {200 + i, 300 + i}));
  return spec;
}

TEST(RunTraining, EpochsVisitEverySequenceOnceInBatches) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.epochs = 3;
  spec.batch_sequences = 2;
  std::vector<TrainProgress> seen;
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress& p) { seen.push_back(p); }, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // 5 sequences in batches of 2: 3 steps an epoch.
  ASSERT_EQ(calls.batches.size(), 9u);
  ASSERT_EQ(r->losses.size(), 9u);
  ASSERT_EQ(r->step_seconds.size(), 9u);
  ASSERT_EQ(seen.size(), 9u);
  std::vector<std::vector<int32_t>> epochs(3);
  for (size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(seen[i].step, static_cast<int64_t>(i + 1));
    EXPECT_EQ(seen[i].total_steps, 9);
    EXPECT_EQ(seen[i].loss, r->losses[i]);
    EXPECT_EQ(calls.batches[i].size(), i % 3 == 2 ? 1u : 2u);
    for (int32_t f : calls.batches[i]) epochs[i / 3].push_back(f);
  }
  for (const auto& e : epochs) EXPECT_EQ(std::set<int32_t>(e.begin(), e.end()), (std::set<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_TRUE(epochs[0] != epochs[1] || epochs[1] != epochs[2]) << "the epochs were not shuffled";
  EXPECT_EQ(r->tokens, 3 * 5 * 4);  // every epoch: 5 sequences of 4 tokens
  // The fake loss is a smooth bowl: AdamW goes down it.
  EXPECT_LT(r->losses.back(), r->losses.front());
}

TEST(RunTraining, SameSeedSameAdapterOtherSeedOther) {
  Calls c1, c2, c3;
  TrainSpec a = fake_spec(&c1), b = fake_spec(&c2), c = fake_spec(&c3);
  for (TrainSpec* s : {&a, &b, &c}) s->epochs = 2, s->batch_sequences = 2, s->optimizer = OptimizerKind::kMuon;
  c.seed = 12;
  std::atomic<bool> cancel{false};
  auto ra = run_training(*tiny().model, a, {}, cancel), rb = run_training(*tiny().model, b, {}, cancel),
       rc = run_training(*tiny().model, c, {}, cancel);
  ASSERT_TRUE(ra.ok() && rb.ok() && rc.ok());
  EXPECT_EQ(flatten(ra->adapter), flatten(rb->adapter));
  EXPECT_EQ(ra->losses, rb->losses);
  EXPECT_EQ(c1.batches, c2.batches);
  EXPECT_NE(flatten(ra->adapter), flatten(rc->adapter));
}

TEST(RunTraining, CancelIsPolledBetweenSteps) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.epochs = 4;
  std::atomic<bool> cancel{false};
  int steps = 0;
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress& p) { if (++steps == 2) cancel = true; }, cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kFailedPrecondition);
  EXPECT_EQ(r.status().message(), "cancelled");
  EXPECT_EQ(steps, 2);
  EXPECT_EQ(calls.batches.size(), 2u);
}

// training.max_job_seconds: a run that has gone on past its limit stops before its next step,
// saying so (the progress callback here makes the second step start late).
TEST(RunTraining, AJobPastItsTimeLimitStopsBeforeTheNextStep) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.epochs = 4;
  spec.max_seconds = 0.2;
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress&) { std::this_thread::sleep_for(std::chrono::milliseconds(300)); },
                        cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), ErrorCode::kResourceExhausted);
  EXPECT_NE(r.status().message().find("training.max_job_seconds"), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find("before step 2 of"), std::string::npos) << r.status().message();
  EXPECT_EQ(calls.batches.size(), 1u);
}

TEST(RunTraining, DeviceRunnerRunsTheSetupAndEveryStepAndItsErrorStopsTheRun) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  std::atomic<bool> cancel{false};
  int runs = 0;
  auto r = run_training(*tiny().model, spec, {}, cancel, [&](const std::function<Status()>& work) {
    ++runs;
    return work();
  });
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(runs, 1 + 5);  // the setup, then five steps
  // The runner refuses its n-th piece of work: the run stops there, naming it.
  auto refusing = [&](int n) {
    auto count = std::make_shared<int>(0);
    return [count, n](const std::function<Status()>& work) {
      return ++*count == n ? failed_precondition("engine stopped") : work();
    };
  };
  auto no_setup = run_training(*tiny().model, spec, {}, cancel, refusing(1));
  ASSERT_FALSE(no_setup.ok());
  EXPECT_NE(no_setup.status().message().find("the run's setup"), std::string::npos) << no_setup.status().message();
  EXPECT_NE(no_setup.status().message().find("engine stopped"), std::string::npos);
  auto no_step = run_training(*tiny().model, spec, {}, cancel, refusing(2));
  ASSERT_FALSE(no_step.ok());
  EXPECT_NE(no_step.status().message().find("training step 1 of 5"), std::string::npos) << no_step.status().message();
  EXPECT_NE(no_step.status().message().find("engine stopped"), std::string::npos);
}

TEST(RunTraining, CheckpointsEveryIntervalWithTheCurrentAdapter) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.checkpoint_interval = 2;
  std::vector<int64_t> at;
  std::vector<std::vector<float>> saved;
  spec.checkpoint = [&](int64_t step, const HostLoraAdapter& ad) -> Status {
    at.push_back(step);
    saved.push_back(flatten(ad));
    return {};
  };
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(at, (std::vector<int64_t>{2, 4}));  // 5 steps
  ASSERT_EQ(saved.size(), 2u);
  EXPECT_NE(saved[0], saved[1]);  // the adapter as it stood then, not a fixed copy
  spec.checkpoint = [](int64_t, const HostLoraAdapter&) -> Status { return io_error("disk full"); };
  auto bad = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("training step 2 of 5"), std::string::npos) << bad.status().message();
  EXPECT_NE(bad.status().message().find("disk full"), std::string::npos);
}

// A checkpoint's copy is taken inside its step's device work and handed on after that work: a
// server's job writes no file on the engine's thread.
TEST(RunTraining, CheckpointsAreHandedOnAfterTheStepsDeviceWork) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.checkpoint_interval = 1;
  bool inside = false;
  int outside = 0;
  spec.checkpoint = [&](int64_t, const HostLoraAdapter&) -> Status {
    outside += !inside;
    return {};
  };
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, {}, cancel, [&](const std::function<Status()>& work) {
    inside = true;
    const Status st = work();
    inside = false;
    return st;
  });
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(outside, 5);  // every step's, none from inside the runner
}

TEST(RunTraining, GrpoDropsUniformGroupsAndRunsTheReferencePassFirst) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.kind = TrainSpec::Kind::kGrpo;
  spec.kl = KlEstimator::kK3;
  spec.batch_sequences = 2;
  for (int32_t g = 0; g < 3; ++g) {
    GrpoGroup group;
    for (int32_t c = 0; c < 2; ++c)
      group.completions.push_back({sequence({10 * g + c, 7}, {300 + c}), g == 1 ? 1.0 : static_cast<double>(c), {}, {}});
    spec.grpo.push_back(group);
  }
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Group 1 (equal rewards) is left out: first the behaviour policy's pass over the kept groups
  // (chunks packed as the steps are: one group each), then two steps of one whole group each.
  ASSERT_EQ(calls.batches.size(), 4u);
  EXPECT_EQ(calls.batches[0], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(calls.batches[1], (std::vector<int32_t>{20, 21}));
  std::set<int32_t> firsts;
  for (size_t i = 2; i < calls.batches.size(); ++i) {
    const auto& b = calls.batches[i];
    ASSERT_EQ(b.size(), 2u);
    EXPECT_EQ(b[1], b[0] + 1);  // a group's completions stay together
    firsts.insert(b[0]);
  }
  EXPECT_EQ(firsts, (std::set<int32_t>{0, 20}));
  using enum ForwardPass;
  EXPECT_EQ(calls.passes, (std::vector<ForwardPass>{kTrain, kTrain, kReference, kTrain, kReference, kTrain}));

  for (auto& g : spec.grpo)
    for (auto& c : g.completions) c.reward = 1.0;
  auto none = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("rewards are all equal"), std::string::npos);
}

// The behaviour policy is the adapter as the run found it: at the first step rho = 1 in value, so
// each target token's dLoss/dlogp is the on-policy -A / (the group's completion tokens); once the
// steps have moved the adapter, rho moves with them and the coefficients differ (-rho A, or 0
// where the clip holds). A completion that brings its own behaviour log-probabilities keeps them.
TEST(RunTraining, GrpoBehaviourPolicyIsTheAdapterAtTheStart) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.kind = TrainSpec::Kind::kGrpo;
  spec.sft.clear();
  spec.epochs = 6;
  spec.batch_sequences = 2;
  spec.optimizer = OptimizerKind::kSgd;
  spec.hyper.lr = 2e4f;  // the fake's logp moves by ~1e-4 of the factors' squared change
  GrpoGroup group;
  group.completions.push_back({sequence({1, 7}, {300, 301}), 1.0, {}, {}});
  group.completions.push_back({sequence({2, 7}, {400, 401}), 0.0, {}, {}});
  spec.grpo.push_back(group);
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(calls.coefs.size(), 6u);
  // dr_grpo: A = +0.5 and -0.5, four completion tokens in the group.
  const std::vector<float> first_good = {0.f, 0.f, -0.125f, -0.125f}, first_bad = {0.f, 0.f, 0.125f, 0.125f};
  EXPECT_EQ(calls.coefs[0][0], first_good);
  EXPECT_EQ(calls.coefs[0][1], first_bad);
  bool moved = false;
  for (size_t step = 1; step < calls.coefs.size(); ++step) moved = moved || calls.coefs[step] != calls.coefs[0];
  EXPECT_TRUE(moved) << "rho stayed 1 at every step: no behaviour log-probabilities were recorded";

  // Given behaviour log-probabilities are kept: 0.1 below the start adapter's own (the first
  // forward of the run above) make rho = e^0.1 = 1.105 at the first step, inside the clip, so the
  // rewarded completion's coefficient is -rho A / 4; the other completion's stays -A / 4.
  Calls given_calls;
  TrainSpec given = spec;
  given.make_trainer = fake_spec(&given_calls).make_trainer;
  given.epochs = 1;
  std::vector<float> behaviour = calls.logps.at(0).at(0);
  for (size_t t = 1; t < behaviour.size(); ++t) behaviour[t] -= 0.1f;
  given.grpo[0].completions[0].behavior_logp = behaviour;
  auto g = run_training(*tiny().model, given, {}, cancel);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  ASSERT_EQ(given_calls.coefs.size(), 1u);
  EXPECT_NEAR(given_calls.coefs[0][0][2], -0.125 * std::exp(0.1), 1e-5);
  EXPECT_EQ(given_calls.coefs[0][1], first_bad);
  // Only the completion without its own went through the behaviour pass.
  ASSERT_GE(given_calls.batches.size(), 1u);
  EXPECT_EQ(given_calls.batches[0], (std::vector<int32_t>{2}));
}

// An online run: before each step the rollout source gets the step number and the adapter as it
// stands (moved by the steps before), and the step trains on exactly the groups it returned, after
// their behaviour pass (rho = 1 at the step, so each OPD coefficient is -(teacher - behaviour) / n);
// the step's mean reward and reverse KL reach the progress and the result, and where each step's
// time went its phases.
TEST(RunTraining, OnlineStepsTrainOnTheRolloutOfTheAdapterAsItStands) {
  Calls calls;
  TrainSpec spec = fake_spec(&calls);
  spec.sft.clear();
  spec.kind = TrainSpec::Kind::kOpd;
  spec.batch_sequences = 8;
  spec.optimizer = OptimizerKind::kSgd;
  spec.hyper.lr = 2e4f;
  std::vector<int64_t> steps_seen;
  std::vector<std::vector<float>> adapters_seen;
  spec.rollout.steps = 3;
  spec.rollout.sample = [&](int64_t step, const LoraAdapter& adapter,
                            const std::atomic<bool>&) -> Result<RolloutSource::Batch> {
    steps_seen.push_back(step);
    adapters_seen.push_back(flatten(adapter));
    RolloutSource::Batch b;
    GrpoGroup g;
    for (int32_t c = 0; c < 2; ++c) {
      GrpoCompletion comp{sequence({static_cast<int32_t>(10 * step + c), 7}, {300 + c, 301}), 0.0, {}, {}};
      comp.teacher_logp = {0.f, 0.f, -0.25f, -0.75f};  // the fake's logp is about -0.5
      g.completions.push_back(std::move(comp));
    }
    b.groups.push_back(std::move(g));
    b.mean_reward = 0.25 * static_cast<double>(step);
    b.sampling_seconds = static_cast<double>(step);
    b.scoring_seconds = 0.5 * static_cast<double>(step);
    b.teacher_seconds = 0.25 * static_cast<double>(step);
    return b;
  };
  std::vector<TrainProgress> progress;
  std::atomic<bool> cancel{false};
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress& p) { progress.push_back(p); }, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(steps_seen, (std::vector<int64_t>{1, 2, 3}));
  ASSERT_EQ(adapters_seen.size(), 3u);
  EXPECT_NE(adapters_seen[1], adapters_seen[0]);  // step 1 moved the adapter step 2 sampled from
  EXPECT_NE(adapters_seen[2], adapters_seen[1]);
  // Per step: the behaviour pass, then the step's forward, over the rollout's two completions.
  ASSERT_EQ(calls.batches.size(), 6u);
  for (int64_t step = 1; step <= 3; ++step) {
    const int32_t first = static_cast<int32_t>(10 * step);
    EXPECT_EQ(calls.batches[2 * (step - 1)], (std::vector<int32_t>{first, first + 1}));
    EXPECT_EQ(calls.batches[2 * (step - 1) + 1], (std::vector<int32_t>{first, first + 1}));
  }
  ASSERT_EQ(calls.coefs.size(), 3u);
  for (size_t step = 0; step < 3; ++step) {
    const auto& behaviour = calls.logps.at(2 * step);  // the behaviour pass's log-probabilities
    for (size_t c = 0; c < 2; ++c)
      for (size_t t = 2; t < 4; ++t) {
        const float teacher = t == 2 ? -0.25f : -0.75f;
        EXPECT_NEAR(calls.coefs[step][c][t], -(teacher - behaviour[c][t]) / 4.0, 1e-6) << step << " " << c << " " << t;
      }
  }
  ASSERT_EQ(r->rewards, (std::vector<double>{0.25, 0.5, 0.75}));
  ASSERT_EQ(r->reverse_kls.size(), 3u);
  double kl = 0;
  for (size_t c = 0; c < 2; ++c) kl += calls.logps[0][c][2] + 0.25 + calls.logps[0][c][3] + 0.75;
  EXPECT_NEAR(r->reverse_kls[0], kl / 4, 1e-6);
  ASSERT_EQ(progress.size(), 3u);
  EXPECT_EQ(progress[2].mean_reward, 0.75);
  EXPECT_EQ(progress[2].reverse_kl, r->reverse_kls[2]);
  // Each step's phases: the rollout's own split as it reported it, its completions' tokens (2 of
  // each of 2 completions) and the trained sequences' (4 each); the trainer's phases, timed inside
  // the step, add up to no more than it.
  ASSERT_EQ(r->step_phases.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    const StepPhases& ph = r->step_phases[i];
    EXPECT_EQ(ph.sampling, static_cast<double>(i + 1));
    EXPECT_EQ(ph.scoring, 0.5 * static_cast<double>(i + 1));
    EXPECT_EQ(ph.teacher, 0.25 * static_cast<double>(i + 1));
    EXPECT_EQ(ph.sampled_tokens, 4);
    EXPECT_EQ(ph.trained_tokens, 8);
    EXPECT_GT(ph.behaviour_logp, 0.0);
    EXPECT_GT(ph.forward_backward, 0.0);
    EXPECT_GT(ph.optimizer, 0.0);
    EXPECT_LE(ph.behaviour_logp + ph.forward_backward + ph.optimizer, r->step_seconds[i]);
  }

  // A rollout's error ends the run, naming the step.
  spec.rollout.sample = [](int64_t step, const LoraAdapter&, const std::atomic<bool>&) -> Result<RolloutSource::Batch> {
    return io_error("reward server down at " + std::to_string(step));
  };
  auto failed = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_FALSE(failed.ok());
  EXPECT_NE(failed.status().message().find("rollout of step 1 of 3"), std::string::npos) << failed.status().message();
  EXPECT_NE(failed.status().message().find("reward server down at 1"), std::string::npos) << failed.status().message();
}

TEST(RunTraining, RefusesBadSpecsNamingTheProblem) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec spec = fake_spec(&calls);
  spec.sft[3].roles.assign(spec.sft[3].roles.size(), TokenRole::kContext);
  auto r = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("sequence 3 has no target token"), std::string::npos) << r.status().message();
  spec = fake_spec(&calls);
  spec.epochs = 0;
  EXPECT_NE(run_training(*tiny().model, spec, {}, cancel).status().message().find("epochs"), std::string::npos);
  spec = fake_spec(&calls);
  spec.sft.clear();
  EXPECT_FALSE(run_training(*tiny().model, spec, {}, cancel).ok());
}

TEST(RunTraining, ContinuesFromABaseAdapterWithoutTouchingIt) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec first = fake_spec(&calls);
  auto base = run_training(*tiny().model, first, {}, cancel);
  ASSERT_TRUE(base.ok());
  const std::vector<float> before = flatten(base->adapter);
  TrainSpec spec = fake_spec(&calls);
  spec.base_adapter = &base->adapter;
  spec.seed = 99;  // would draw a different fresh A: the base must win
  spec.optimizer = OptimizerKind::kSgd;
  spec.hyper.lr = 0.f;
  auto same = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(same.ok());
  EXPECT_EQ(flatten(same->adapter), before);
  spec.hyper.lr = 0.5f;
  auto moved = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(moved.ok());
  EXPECT_NE(flatten(moved->adapter), before);
  EXPECT_EQ(flatten(base->adapter), before);  // trained a copy
}

// ---------------------------------------------------------------- the training controls

// The fake's -logp of `token` at parameters theta: kC * sum_i (theta_i - token / 512)^2 + 0.5.
double fake_nll(const std::vector<float>& theta, int32_t token) {
  double sum = 0;
  for (float x : theta) sum += (x - token / 512.0) * (x - token / 512.0);
  return FakeTrainer::kC * sum + 0.5;
}

// Five sequences with 1 to 5 target tokens: a mean over the wrong set of tokens shows.
TrainSpec uneven_spec(Calls* calls) {
  TrainSpec spec = fake_spec(calls);
  spec.sft.clear();
  for (int32_t i = 0; i < 5; ++i) {
    std::vector<int32_t> answer;
    for (int32_t k = 0; k <= i; ++k) answer.push_back(200 + 10 * i + k);
    spec.sft.push_back(sequence({i, 100 + i}, answer));
  }
  return spec;
}

// One SGD step on all five sequences at lr 1000 (the fake's gradients are ~1e-4): without clipping
// the step moves the adapter by lr * g, whose norm / lr is the gradient norm reported; clipped to a
// quarter of it, by the same step scaled by max / (norm + 1e-6), and the norm reported is still
// the one before clipping.
TEST(RunTraining, ReportsTheGradNormBeforeClippingAndStepsOnTheClippedGradient) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec spec = uneven_spec(&calls);
  spec.batch_sequences = 5;
  spec.optimizer = OptimizerKind::kSgd;
  spec.lr_schedule.kind = LrSchedule::kConstant;
  spec.hyper.lr = 0.f;
  const std::vector<float> init = flatten(run_training(*tiny().model, spec, {}, cancel).value().adapter);
  spec.hyper.lr = 1000.f;
  spec.max_grad_norm = 0.f;
  auto free = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(free.ok()) << free.status().to_string();
  const std::vector<float> moved = flatten(free->adapter);
  double norm = 0;
  for (size_t i = 0; i < init.size(); ++i) norm += (static_cast<double>(moved[i]) - init[i]) * (moved[i] - init[i]);
  norm = std::sqrt(norm) / 1000.0;
  ASSERT_EQ(free->grad_norms.size(), 1u);
  EXPECT_GT(norm, 1e-6);
  EXPECT_NEAR(free->grad_norms[0], norm, 1e-4 * norm);  // the f32 step's rounding: ~1e-7 of |theta| ~ 0.1

  spec.max_grad_norm = static_cast<float>(free->grad_norms[0] / 4);
  auto clipped = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(clipped.ok()) << clipped.status().to_string();
  EXPECT_EQ(clipped->grad_norms[0], free->grad_norms[0]);
  const double scale = spec.max_grad_norm / (free->grad_norms[0] + 1e-6);
  const std::vector<float> c = flatten(clipped->adapter);
  double worst = 0, biggest = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    const double want = (static_cast<double>(moved[i]) - init[i]) * scale, got = static_cast<double>(c[i]) - init[i];
    worst = std::max(worst, std::fabs(got - want));
    biggest = std::max(biggest, std::fabs(want));
  }
  EXPECT_GT(biggest, 1e-3);
  EXPECT_LE(worst, 1e-4 * biggest) << "the clipped step is not the free step times " << scale;
}

// The rate of each step reaches the optimizer: with SGD, the first step of a 2-step warmup moves
// the adapter by half of what the constant schedule's first step does (the same gradient), and
// the rates reported per step are the schedule's.
TEST(RunTraining, EachStepRunsAtTheScheduledRate) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec spec = fake_spec(&calls);  // 5 steps of 1 sequence
  spec.optimizer = OptimizerKind::kSgd;
  spec.hyper.lr = 500.f;
  spec.checkpoint_interval = 1;
  std::vector<std::vector<float>> after;  // the adapter after each step
  spec.checkpoint = [&](int64_t, const HostLoraAdapter& ad) -> Status {
    after.push_back(flatten(ad));
    return {};
  };
  spec.lr_schedule = {LrSchedule::kLinear, 2};
  std::vector<double> seen;
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress& p) { seen.push_back(p.lr); }, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  // Warmup 250, 500; then p = 0, 1/3, 2/3 of the linear decay.
  const std::vector<double> want = {250, 500, 500, 500 * (2.0 / 3), 500 * (1.0 / 3)};
  ASSERT_EQ(r->lrs.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(r->lrs[i], want[i], 1e-4) << "step " << i + 1;
    EXPECT_EQ(seen[i], r->lrs[i]);
  }
  const std::vector<float> warm = after.at(0);
  after.clear();
  spec.lr_schedule = {LrSchedule::kConstant, 0};
  spec.hyper.lr = 0.f;
  const std::vector<float> init = flatten(run_training(*tiny().model, spec, {}, cancel).value().adapter);
  spec.hyper.lr = 500.f;
  after.clear();
  ASSERT_TRUE(run_training(*tiny().model, spec, {}, cancel).ok());
  const std::vector<float> full = after.at(0);
  double worst = 0, biggest = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    const double want_delta = (static_cast<double>(full[i]) - init[i]) / 2, got = static_cast<double>(warm[i]) - init[i];
    worst = std::max(worst, std::fabs(got - want_delta));
    biggest = std::max(biggest, std::fabs(want_delta));
  }
  EXPECT_GT(biggest, 1e-3);
  EXPECT_LE(worst, 1e-4 * biggest);
}

// Four micro-batches of one sequence step as one batch of four: the same sequences per step, each
// micro-batch's coefficients those of the whole step (its means over all 1 + 2 + 3 + 4 or 5
// targets), losses and adapters equal up to the order of the sums.
TEST(RunTraining, AccumulatedMicroBatchesStepAsOneBatch) {
  std::atomic<bool> cancel{false};
  Calls one_calls, acc_calls;
  TrainSpec one = uneven_spec(&one_calls), acc = uneven_spec(&acc_calls);
  one.epochs = acc.epochs = 2;
  one.batch_sequences = 4;
  acc.batch_sequences = 1;
  acc.accumulation_steps = 4;
  int acc_runs = 0;
  auto a = run_training(*tiny().model, one, {}, cancel);
  auto b = run_training(*tiny().model, acc, {}, cancel, [&](const std::function<Status()>& work) {
    ++acc_runs;
    return work();
  });
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << b.status().to_string();
  EXPECT_EQ(acc_runs, 1 + 2 * 5);  // the setup, then every micro-batch its own device work
  ASSERT_EQ(a->losses.size(), 4u);  // per epoch: a step of 4, a step of 1
  ASSERT_EQ(b->losses.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(b->losses[i], a->losses[i], 1e-12 * std::fabs(a->losses[i])) << "step " << i + 1;
    EXPECT_NEAR(b->grad_norms[i], a->grad_norms[i], 1e-6 * a->grad_norms[i]) << "step " << i + 1;
  }
  // The micro-batches' coefficients, one after another, are the batch's.
  ASSERT_EQ(one_calls.coefs.size(), 4u);
  ASSERT_EQ(acc_calls.coefs.size(), 10u);
  size_t m = 0;
  for (const auto& step : one_calls.coefs)
    for (const auto& row : step) EXPECT_EQ(acc_calls.coefs.at(m++).at(0), row);
  const std::vector<float> fa = flatten(a->adapter), fb = flatten(b->adapter);
  ASSERT_EQ(fa.size(), fb.size());
  for (size_t i = 0; i < fa.size(); ++i) ASSERT_NEAR(fb[i], fa[i], 1e-6) << i;
}

// A held-out 40% (2 of 5 sequences) is never trained on; its loss is taken after steps 4 and 8
// (eval_every 4) and the last, 9, from forwards that keep nothing, and equals the fake's mean
// -logp over the held-out targets at the adapter as it stood after that step.
TEST(RunTraining, HeldOutSequencesAreEvaluatedAtTheirStepsAndNeverTrained) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec spec = uneven_spec(&calls);
  spec.epochs = 3;
  spec.eval_fraction = 0.4;
  spec.eval_every = 4;
  spec.checkpoint_interval = 1;
  std::vector<std::vector<float>> after;
  spec.checkpoint = [&](int64_t, const HostLoraAdapter& ad) -> Status {
    after.push_back(flatten(ad));
    return {};
  };
  std::vector<int64_t> eval_steps;
  auto r = run_training(*tiny().model, spec, [&](const TrainProgress& p) { if (p.eval_loss) eval_steps.push_back(p.step); },
                        cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(r->losses.size(), 9u);  // 3 sequences left, batch 1, 3 epochs
  EXPECT_EQ(eval_steps, (std::vector<int64_t>{4, 8, 9}));
  ASSERT_EQ(r->eval_losses.size(), 3u);
  std::set<int32_t> held;
  for (const auto& b : calls.eval_batches) held.insert(b.begin(), b.end());
  ASSERT_EQ(held.size(), 2u);
  EXPECT_EQ(calls.eval_batches.size(), 3u * 2);  // each eval point: two batches of one sequence (batch_sequences 1)
  for (const auto& b : calls.batches)
    for (int32_t f : b) EXPECT_EQ(held.count(f), 0u) << "held-out sequence " << f << " was trained on";
  for (const EvalPoint& e : r->eval_losses) {
    const std::vector<float>& theta = after.at(static_cast<size_t>(e.step - 1));
    double sum = 0;
    int64_t n = 0;
    for (const TrainSequence& q : spec.sft) {
      if (!held.count(q.tokens[0])) continue;
      for (size_t t = 1; t < q.tokens.size(); ++t)
        if (q.roles[t] == TokenRole::kTarget) sum += fake_nll(theta, q.tokens[t]), ++n;
    }
    EXPECT_NEAR(e.loss, sum / n, 1e-6 * (sum / n)) << "after step " << e.step;
  }
}

// GRPO: two micro-batches of one group step as one batch of both (each group's coefficients are
// the batch's: the mean over the step's groups, 2), and a held-out group (eval_fraction 1/3 of 3
// groups) is evaluated and never stepped on.
TEST(RunTraining, GrpoAccumulatesWholeGroupsAndHoldsOutGroups) {
  auto grpo_spec = [](Calls* calls) {
    TrainSpec spec = fake_spec(calls);
    spec.kind = TrainSpec::Kind::kGrpo;
    spec.sft.clear();
    for (int32_t g = 0; g < 2; ++g) {
      GrpoGroup group;
      for (int32_t c = 0; c < 2; ++c)
        group.completions.push_back({sequence({10 * g + c, 7}, std::vector<int32_t>(1 + g + c, 300)), double(c), {}, {}});
      spec.grpo.push_back(group);
    }
    return spec;
  };
  std::atomic<bool> cancel{false};
  Calls one_calls, acc_calls;
  TrainSpec one = grpo_spec(&one_calls), acc = grpo_spec(&acc_calls);
  one.batch_sequences = 4;
  acc.batch_sequences = 2;
  acc.accumulation_steps = 2;
  auto a = run_training(*tiny().model, one, {}, cancel), b = run_training(*tiny().model, acc, {}, cancel);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string() << b.status().to_string();
  ASSERT_EQ(a->losses.size(), 1u);
  ASSERT_EQ(b->losses.size(), 1u);
  EXPECT_NEAR(b->losses[0], a->losses[0], 1e-12);
  ASSERT_EQ(one_calls.coefs.size(), 1u);
  ASSERT_EQ(acc_calls.coefs.size(), 2u);
  EXPECT_EQ(acc_calls.coefs[0][0], one_calls.coefs[0][0]);
  EXPECT_EQ(acc_calls.coefs[0][1], one_calls.coefs[0][1]);
  EXPECT_EQ(acc_calls.coefs[1][0], one_calls.coefs[0][2]);
  EXPECT_EQ(acc_calls.coefs[1][1], one_calls.coefs[0][3]);

  Calls held_calls;
  TrainSpec held = grpo_spec(&held_calls);
  held.grpo.push_back(held.grpo[0]);
  for (GrpoCompletion& c : held.grpo[2].completions) c.sequence.tokens[0] += 100;  // first tokens 100, 101
  held.batch_sequences = 2;
  held.epochs = 2;
  held.eval_fraction = 1.0 / 3;
  auto h = run_training(*tiny().model, held, {}, cancel);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  ASSERT_EQ(h->losses.size(), 4u);  // 2 groups a step of one, 2 epochs
  ASSERT_EQ(h->eval_losses.size(), 1u);
  ASSERT_EQ(held_calls.eval_batches.size(), 1u);
  const std::vector<int32_t> evaluated = held_calls.eval_batches[0];
  ASSERT_EQ(evaluated.size(), 2u);  // one whole group
  // The behaviour pass's forwards (kTrain, before the first step) cover all three groups; the
  // steps' forwards never the held-out one.
  for (size_t i = held_calls.batches.size() - 4; i < held_calls.batches.size(); ++i)
    for (int32_t f : held_calls.batches[i]) EXPECT_TRUE(f != evaluated[0] && f != evaluated[1]) << "step " << i;
}

TEST(RunTraining, PackingHandsTheTrainerPackedSequencesOfAtMostTheLimit) {
  Calls calls;
  std::atomic<bool> cancel{false};
  TrainSpec spec = fake_spec(&calls);  // five sequences of 4 tokens
  spec.pack_tokens = 9;
  auto r = run_training(*tiny().model, spec, {}, cancel);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  ASSERT_EQ(calls.packed.size(), 3u);  // two, two and one a sequence; one sequence a step
  for (size_t step = 0; step < 3; ++step) {
    ASSERT_EQ(calls.packed[step].size(), 1u);
    EXPECT_EQ(calls.packed[step][0], step < 2 ? (std::vector<int64_t>{4, 4}) : (std::vector<int64_t>{4}));
  }
  EXPECT_EQ(r->tokens, 5 * 4);
}

TEST(RunTraining, RefusesBadControlsNamingThem) {
  Calls calls;
  std::atomic<bool> cancel{false};
  auto refused = [&](const std::function<void(TrainSpec&)>& edit, const std::string& what) {
    TrainSpec spec = fake_spec(&calls);
    edit(spec);
    auto r = run_training(*tiny().model, spec, {}, cancel);
    ASSERT_FALSE(r.ok()) << what;
    EXPECT_NE(r.status().message().find(what), std::string::npos) << r.status().to_string();
  };
  refused([](TrainSpec& s) { s.accumulation_steps = 0; }, "accumulation_steps must be >= 1");
  refused([](TrainSpec& s) { s.max_grad_norm = -1; }, "max_grad_norm must be finite and >= 0");
  refused([](TrainSpec& s) { s.max_grad_norm = NAN; }, "max_grad_norm must be finite and >= 0");
  refused([](TrainSpec& s) { s.lr_schedule.warmup_steps = -1; }, "warmup_steps must be >= 0");
  refused([](TrainSpec& s) { s.eval_fraction = 1; }, "eval_fraction must be in [0, 1)");
  refused([](TrainSpec& s) { s.eval_every = -2; }, "eval_every must be >= 0");
  refused([](TrainSpec& s) { s.eval_fraction = 0.9; }, "holds out 5 of the 5 sequences");
  refused([](TrainSpec& s) {
    s.kind = TrainSpec::Kind::kGrpo;
    s.pack_tokens = 8;
  }, "packing applies to SFT runs");
}

}  // namespace
}  // namespace kiln
