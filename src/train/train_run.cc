// The training loop: the adapter (fresh or continued), a deterministic batch plan (train/train_plan.h),
// then per step, for each of its micro-batches forward -> loss -> backward (the gradients adding
// up), then the global gradient norm, clipped, and one optimizer step per factor at the
// scheduled rate; at the eval points the held-out loss.
#include "train/train_run.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "train/grad_clip.h"
#include "train/packing.h"
#include "train/token_loss.h"
#include "train/train_plan.h"

namespace kiln {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

Status check_spec(const TrainSpec& s) {
  if (s.epochs < 1) return invalid_argument("epochs must be >= 1, got " + std::to_string(s.epochs));
  if (s.batch_sequences < 1) return invalid_argument("batch_sequences must be >= 1, got " + std::to_string(s.batch_sequences));
  if (s.checkpoint_interval < 0)
    return invalid_argument("checkpoint_interval must be >= 0, got " + std::to_string(s.checkpoint_interval));
  if (s.accumulation_steps < 1)
    return invalid_argument("accumulation_steps must be >= 1, got " + std::to_string(s.accumulation_steps));
  if (!(std::isfinite(s.max_grad_norm) && s.max_grad_norm >= 0))
    return invalid_argument("max_grad_norm must be finite and >= 0, got " + std::to_string(s.max_grad_norm));
  if (s.lr_schedule.warmup_steps < 0)
    return invalid_argument("warmup_steps must be >= 0, got " + std::to_string(s.lr_schedule.warmup_steps));
  if (s.pack_tokens < 0) return invalid_argument("pack_tokens must be >= 0, got " + std::to_string(s.pack_tokens));
  if (s.pack_tokens > 0 && s.kind != TrainSpec::Kind::kSft) return invalid_argument("packing applies to SFT runs");
  if (!(s.eval_fraction >= 0 && s.eval_fraction < 1))
    return invalid_argument("eval_fraction must be in [0, 1), got " + std::to_string(s.eval_fraction));
  if (s.eval_every < 0) return invalid_argument("eval_every must be >= 0, got " + std::to_string(s.eval_every));
  auto check_seq = [](const TrainSequence& q, const std::string& where) -> Status {
    if (q.tokens.size() < 2) return invalid_argument(where + ": fewer than 2 tokens");
    if (q.roles.size() != q.tokens.size())
      return invalid_argument(where + ": " + std::to_string(q.roles.size()) + " roles for " + std::to_string(q.tokens.size()) + " tokens");
    return {};
  };
  if (s.kind == TrainSpec::Kind::kSft) {
    if (s.sft.empty()) return invalid_argument("an SFT run needs at least one sequence");
    for (size_t i = 0; i < s.sft.size(); ++i) {
      KILN_RETURN_IF_ERROR(check_seq(s.sft[i], "sequence " + std::to_string(i)));
      bool target = false;
      for (size_t t = 1; t < s.sft[i].roles.size(); ++t) target = target || s.sft[i].roles[t] == TokenRole::kTarget;
      if (!target) return invalid_argument("sequence " + std::to_string(i) + " has no target token: nothing to learn");
    }
  } else if (s.rollout.sample) {
    if (s.rollout.steps < 1) return invalid_argument("an online run needs rollout steps >= 1, got " + std::to_string(s.rollout.steps));
    if (s.eval_fraction > 0) return invalid_argument("an online run has no held-out split (eval_fraction)");
  } else {
    if (s.kind == TrainSpec::Kind::kOpd) return invalid_argument("an OPD run samples its groups: it needs a rollout source");
    if (s.grpo.empty()) return invalid_argument("a GRPO run needs at least one group");
    for (size_t g = 0; g < s.grpo.size(); ++g) {
      if (s.grpo[g].completions.size() < 2)
        return invalid_argument("group " + std::to_string(g) + " has fewer than 2 completions");
      for (size_t c = 0; c < s.grpo[g].completions.size(); ++c) {
        const std::string where = "group " + std::to_string(g) + " completion " + std::to_string(c);
        KILN_RETURN_IF_ERROR(check_seq(s.grpo[g].completions[c].sequence, where));
        if (!std::isfinite(s.grpo[g].completions[c].reward)) return invalid_argument(where + ": reward is not finite");
      }
    }
  }
  return {};
}

// A copy of `base` in f32 on the model's device: the run trains the copy, never the original.
Result<LoraAdapter> copy_adapter(const LoraAdapter& base, StorageFacet& storage) {
  KILN_ASSIGN_OR_RETURN(LoraAdapter out, LoraAdapter::zeros_like(base, storage));
  for (int64_t l = 0; l < base.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& src = base.factors(l, static_cast<LoraTarget>(t));
      if (!src.defined()) continue;
      LoraFactors& dst = out.factors(l, static_cast<LoraTarget>(t));
      for (auto [s, d] : {std::pair{&src.a, &dst.a}, std::pair{&src.b, &dst.b}}) {
        if (s->dtype() == DType::kF32) {
          KILN_RETURN_IF_ERROR(storage.copy(*s, *d));
          continue;
        }
        Tensor host = Tensor::empty(s->shape(), s->dtype());
        KILN_RETURN_IF_ERROR(storage.copy_to_host(*s, host));
        Tensor f = Tensor::empty(s->shape(), DType::kF32);
        for (int64_t i = 0; i < host.numel(); ++i) {
          const uint16_t h = host.data<uint16_t>()[i];
          f.data<float>()[i] = s->dtype() == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
        }
        KILN_RETURN_IF_ERROR(storage.copy_from_host(f, *d));
      }
    }
  return out;
}

// One parameter of the optimizer: a factor, its gradient and its state (allocated once).
struct ParamSlot {
  Tensor param, grad, m, v;
};

Result<std::vector<ParamSlot>> make_slots(LoraAdapter& adapter, LoraAdapter& grads, OptimizerKind kind,
                                          StorageFacet& storage) {
  std::vector<ParamSlot> slots;
  for (int64_t l = 0; l < adapter.num_layers(); ++l)
    for (int t = 0; t < kLoraTargetCount; ++t) {
      const LoraFactors& f = adapter.factors(l, static_cast<LoraTarget>(t));
      if (!f.defined()) continue;
      const LoraFactors& g = grads.factors(l, static_cast<LoraTarget>(t));
      if (!g.defined()) return internal_error("the trainer has no gradient for layer " + std::to_string(l) + " " +
                                              std::string(lora_target_name(static_cast<LoraTarget>(t))));
      for (auto [p, d] : {std::pair{f.a, g.a}, std::pair{f.b, g.b}}) {
        ParamSlot s{p, d, {}, {}};
        if (kind != OptimizerKind::kSgd) {
          KILN_ASSIGN_OR_RETURN(s.m, storage.allocate(p.shape(), DType::kF32));  // zero-filled
        }
        if (kind == OptimizerKind::kAdamW) {
          KILN_ASSIGN_OR_RETURN(s.v, storage.allocate(p.shape(), DType::kF32));
        }
        slots.push_back(std::move(s));
      }
    }
  return slots;
}

// GRPO's behaviour policy is the adapter as the run found it: the policy that sampled the
// completions when they came from the served adapter (or, from a fresh adapter, whose B is zero,
// the base model). Its log-probabilities, taken once before the first step, let rho =
// exp(logp - logp_behaviour) follow the steps' drift, so the clip bounds how far later steps (and
// epochs) push a token, as PPO's old policy does; without them rho stayed 1 in value throughout.
// A completion that brings its own behaviour log-probabilities keeps them. The groups go through
// the trainer in chunks packed as the steps' batches are, each chunk its own device work (serving
// continues between chunks).
Status record_behaviour_logp(LoraTrainer& trainer, std::vector<GrpoGroup>& grpo, const std::vector<size_t>& items,
                             int64_t batch_sequences, const std::atomic<bool>& cancel, const DeviceRunner& runner) {
  std::vector<GrpoCompletion*> pending;
  int64_t pending_size = 0;
  auto flush = [&]() -> Status {
    if (pending.empty()) return {};
    if (cancel.load()) return failed_precondition("cancelled");
    std::vector<TrainSequence> seqs;
    for (const GrpoCompletion* c : pending) seqs.push_back(c->sequence);
    auto work = [&]() -> Status {
      // kTrain, as the steps' forwards: the same path gives rho = 1 exactly at the first step.
      KILN_ASSIGN_OR_RETURN(TokenLogprobs logp, trainer.forward(seqs, ForwardPass::kTrain));
      for (size_t i = 0; i < pending.size(); ++i) pending[i]->behavior_logp = std::move(logp[i]);
      return {};
    };
    Status st = run_on_device(runner, work);
    pending.clear();
    pending_size = 0;
    return st.ok() ? st : st.with_context("the behaviour policy's log-probabilities");
  };
  for (size_t idx : items) {
    std::vector<GrpoCompletion*> group;
    for (GrpoCompletion& c : grpo[idx].completions)
      if (c.behavior_logp.empty()) group.push_back(&c);
    if (group.empty()) continue;
    const int64_t sz = static_cast<int64_t>(group.size());
    if (!pending.empty() && pending_size + sz > batch_sequences) KILN_RETURN_IF_ERROR(flush());
    pending.insert(pending.end(), group.begin(), group.end());
    pending_size += sz;
  }
  return flush();
}

// One micro-batch as the trainer and the losses take it: its sequences (packed ones built) and,
// for GRPO, its groups (whose completions are the sequences, in order).
struct Batch {
  std::vector<TrainSequence> seqs;
  std::vector<GrpoGroup> groups;
  int64_t tokens = 0;
};

Batch make_batch(const TrainPlan::MicroBatch& mb, const TrainSpec& spec, const std::vector<size_t>& items,
                 const std::vector<GrpoGroup>& grpo) {
  Batch b;
  for (const TrainPlan::Unit& unit : mb) {
    if (spec.kind == TrainSpec::Kind::kGrpo) {
      b.groups.push_back(grpo[items[unit[0]]]);
      for (const GrpoCompletion& c : b.groups.back().completions) b.seqs.push_back(c.sequence);
    } else if (spec.pack_tokens > 0) {
      std::vector<const TrainSequence*> examples;
      for (size_t i : unit) examples.push_back(&spec.sft[items[i]]);
      b.seqs.push_back(pack_sequences(examples));
    } else {
      b.seqs.push_back(spec.sft[items[unit[0]]]);
    }
  }
  for (const TrainSequence& q : b.seqs) b.tokens += static_cast<int64_t>(q.tokens.size());
  return b;
}

LossScale loss_scale(const Batch& b, const TrainSpec& spec) {
  switch (spec.kind) {
    case TrainSpec::Kind::kSft: return sft_loss_scale(b.seqs);
    case TrainSpec::Kind::kOpd: return opd_loss_scale(b.groups);
    case TrainSpec::Kind::kGrpo: break;
  }
  return grpo_loss_scale(b.groups, spec.advantage);
}

// An online step's micro-batches: the rollout's groups (GRPO: those with unequal rewards) in order,
// whole groups, as many as fit in batch_sequences completions (at least one).
std::vector<Batch> rollout_batches(const std::vector<GrpoGroup>& groups, const std::vector<size_t>& items,
                                   int64_t batch_sequences) {
  std::vector<Batch> out;
  int64_t in_last = 0;
  for (size_t idx : items) {
    const GrpoGroup& g = groups[idx];
    const int64_t n = static_cast<int64_t>(g.completions.size());
    if (out.empty() || in_last + n > batch_sequences) {
      out.emplace_back();
      in_last = 0;
    }
    Batch& b = out.back();
    b.groups.push_back(g);
    for (const GrpoCompletion& c : g.completions) {
      b.seqs.push_back(c.sequence);
      b.tokens += static_cast<int64_t>(c.sequence.tokens.size());
    }
    in_last += n;
  }
  return out;
}

// The mean per-token reverse KL of a rollout (behaviour - teacher log-probabilities over the
// completions' target tokens): a one-sample estimate of KL(student || teacher) per token.
std::optional<double> mean_reverse_kl(const std::vector<GrpoGroup>& groups) {
  double sum = 0;
  int64_t n = 0;
  for (const GrpoGroup& g : groups)
    for (const GrpoCompletion& c : g.completions) {
      if (c.teacher_logp.size() != c.sequence.tokens.size() || c.behavior_logp.size() != c.sequence.tokens.size())
        continue;
      for (size_t t = 1; t < c.sequence.roles.size(); ++t)
        if (c.sequence.roles[t] == TokenRole::kTarget) sum += c.behavior_logp[t] - c.teacher_logp[t], ++n;
    }
  if (n == 0) return std::nullopt;
  return sum / static_cast<double>(n);
}

// The loss of one batch (its part of a loss whose means `scale` counts), after the reference pass
// GRPO's KL estimator needs; `pass` kTrain keeps what the backward needs.
Result<TokenLoss> batch_loss(LoraTrainer& trainer, const Batch& b, const TrainSpec& spec, const LossScale& scale,
                             ForwardPass pass) {
  TokenLogprobs ref;
  if (spec.kind == TrainSpec::Kind::kGrpo && spec.kl != KlEstimator::kNone) {  // first: it keeps nothing
    KILN_ASSIGN_OR_RETURN(ref, trainer.forward(b.seqs, ForwardPass::kReference));
  }
  KILN_ASSIGN_OR_RETURN(TokenLogprobs logp, trainer.forward(b.seqs, pass));
  Result<TokenLoss> l = spec.kind == TrainSpec::Kind::kSft ? sft_loss(b.seqs, logp, spec.echo_lambda, scale)
                        : spec.kind == TrainSpec::Kind::kOpd
                            ? opd_loss(b.groups, logp, {spec.opd_reward_coeff, spec.advantage}, scale)
                            : grpo_loss(b.groups, logp, ref,
                                        {spec.advantage, spec.clip_epsilon, spec.kl, spec.kl_coeff, spec.echo_lambda},
                                        scale);
  if (l.ok() && !std::isfinite(l->loss)) return internal_error("the loss is not finite (" + std::to_string(l->loss) + ")");
  return l;
}

}  // namespace

Result<TrainResult> run_training(Qwen35Model& model, const TrainSpec& spec,
                                 const std::function<void(const TrainProgress&)>& progress,
                                 const std::atomic<bool>& cancel, const DeviceRunner& runner) {
  KILN_RETURN_IF_ERROR(check_spec(spec));
  const auto t_start = Clock::now();
  const bool sft = spec.kind == TrainSpec::Kind::kSft;
  const bool online = !sft && static_cast<bool>(spec.rollout.sample);

  // GRPO groups whose rewards are all equal teach nothing: left out of the plan, not stepped on.
  std::vector<size_t> items;
  std::vector<PlanItem> plan_items;
  if (sft) {
    for (size_t i = 0; i < spec.sft.size(); ++i)
      items.push_back(i), plan_items.push_back({1, static_cast<int64_t>(spec.sft[i].tokens.size())});
  } else if (!online) {
    for (size_t g = 0; g < spec.grpo.size(); ++g) {
      std::vector<double> r;
      for (const auto& c : spec.grpo[g].completions) r.push_back(c.reward);
      if (grpo_advantages(r, spec.advantage))
        items.push_back(g), plan_items.push_back({static_cast<int64_t>(spec.grpo[g].completions.size()), 0});
    }
    if (items.empty()) return invalid_argument("every group's rewards are all equal: GRPO has nothing to learn");
  }
  TrainPlan plan;
  if (!online) {
    KILN_ASSIGN_OR_RETURN(plan, plan_training(plan_items, spec));
  }
  std::vector<GrpoGroup> grpo = sft || online ? std::vector<GrpoGroup>{} : spec.grpo;  // behaviour log-probs filled in below

  StorageFacet& storage = model.backend().storage();
  OptimizerFacet& optimizer = model.backend().optimizer();
  LoraAdapter adapter;
  TrainResult result;
  {
    std::unique_ptr<LoraTrainer> trainer;
    std::vector<ParamSlot> slots;
    std::vector<Tensor> grads;  // every factor's gradient: the global norm's
    auto setup = [&]() -> Status {
      if (spec.base_adapter) {
        KILN_ASSIGN_OR_RETURN(adapter, copy_adapter(*spec.base_adapter, storage));
      } else {
        LoraConfig lora = spec.lora;
        if (lora.targets.empty())  // TrainSpec's default: every projection the model has
          for (int t = 0; t < kLoraTargetCount; ++t) lora.targets.push_back(static_cast<LoraTarget>(t));
        KILN_ASSIGN_OR_RETURN(adapter, LoraAdapter::init(lora, model.config(), spec.seed, storage));
      }
      if (spec.make_trainer) {
        KILN_ASSIGN_OR_RETURN(trainer, spec.make_trainer(model, adapter));
      } else {
        KILN_ASSIGN_OR_RETURN(trainer, LoraTrainer::create(model, adapter, spec.trainer));
      }
      KILN_ASSIGN_OR_RETURN(slots, make_slots(adapter, trainer->grads(), spec.optimizer, storage));
      for (const ParamSlot& s : slots) grads.push_back(s.grad);
      return trainer->zero_grads();
    };
    if (Status st = run_on_device(runner, setup); !st.ok()) return st.with_context("the run's setup");
    // The held-out groups too: their loss takes rho against the same behaviour policy.
    if (!sft && !online)
      KILN_RETURN_IF_ERROR(record_behaviour_logp(*trainer, grpo, items, spec.batch_sequences, cancel, runner));

    // The held-out loss: forward only, batch by batch, the means over the whole held-out set.
    std::vector<Batch> eval_batches;
    LossScale eval_scale;
    for (const TrainPlan::MicroBatch& mb : plan.eval) {
      eval_batches.push_back(make_batch(mb, spec, items, grpo));
      eval_scale += loss_scale(eval_batches.back(), spec);
    }
    auto held_out_loss = [&](int64_t step) -> Result<double> {
      double total = 0;
      for (size_t b = 0; b < eval_batches.size(); ++b) {
        if (cancel.load()) return failed_precondition("cancelled");
        auto work = [&]() -> Status {
          KILN_ASSIGN_OR_RETURN(const TokenLoss l, batch_loss(*trainer, eval_batches[b], spec, eval_scale, ForwardPass::kEval));
          total += l.loss;
          return {};
        };
        if (Status st = run_on_device(runner, work); !st.ok())
          return st.with_context("the held-out loss after step " + std::to_string(step) + ", batch " +
                                 std::to_string(b + 1) + " of " + std::to_string(eval_batches.size()));
      }
      return total;
    };

    // One optimizer step over `batches` (its micro-batches, each its own device work): the loss,
    // the gradient norm before clipping, and the step's rate come back in `out`.
    struct StepOut {
      double loss = 0;
      GradClip clip;
      float lr = 0;
      double forward_backward = 0, optimizer = 0;  // seconds (StepPhases)
    };
    auto run_step = [&](int64_t step, int64_t total, const std::vector<Batch>& batches) -> Result<StepOut> {
      StepOut out;
      LossScale scale;  // the step's: every micro-batch's loss is its part of the step's means
      for (const Batch& b : batches) scale += loss_scale(b, spec);
      OptimizerHyper hyper = spec.hyper;
      hyper.lr = static_cast<float>(scheduled_lr(spec.hyper.lr, spec.lr_schedule, step, total));
      out.lr = hyper.lr;
      const bool checkpoint = spec.checkpoint && spec.checkpoint_interval > 0 && step % spec.checkpoint_interval == 0;
      HostLoraAdapter snapshot;  // the adapter after this step, for the checkpoint
      for (size_t m = 0; m < batches.size(); ++m) {
        if (m > 0 && cancel.load()) return failed_precondition("cancelled");
        const bool last = m + 1 == batches.size();
        auto device_work = [&]() -> Status {
          const auto t_work = Clock::now();
          KILN_ASSIGN_OR_RETURN(const TokenLoss l, batch_loss(*trainer, batches[m], spec, scale, ForwardPass::kTrain));
          out.loss += l.loss;
          KILN_RETURN_IF_ERROR(trainer->backward(l.coef));
          if (!last) {
            const Status synced = storage.synchronize();
            out.forward_backward += seconds_since(t_work);
            return synced;
          }
          KILN_ASSIGN_OR_RETURN(out.clip, clip_by_global_norm(optimizer, grads, spec.max_grad_norm));
          const auto t_optimizer = Clock::now();  // the norm came back: the backward is done
          out.forward_backward += std::chrono::duration<double>(t_optimizer - t_work).count();
          hyper.grad_scale = out.clip.scale;
          std::vector<OptimizerStepArgs> steps;
          steps.reserve(slots.size());
          for (const ParamSlot& s : slots) {
            OptimizerStepArgs& a = steps.emplace_back();
            a.kind = spec.optimizer;
            a.param = s.param;
            a.grad = s.grad;
            a.m = s.m;
            a.v = s.v;
            a.hyper = hyper;
            a.step = step;
          }
          KILN_RETURN_IF_ERROR(optimizer.step_many(steps));
          KILN_RETURN_IF_ERROR(trainer->zero_grads());
          const Status synced = storage.synchronize();
          out.optimizer = seconds_since(t_optimizer);
          if (checkpoint && synced.ok()) {
            KILN_ASSIGN_OR_RETURN(snapshot, adapter.download(storage));
          }
          return synced;
        };
        Status st = run_on_device(runner, device_work);
        if (st.ok() && last && checkpoint) st = spec.checkpoint(step, snapshot);
        if (!st.ok()) {
          std::string where = "training step " + std::to_string(step) + " of " + std::to_string(total);
          if (batches.size() > 1) where += ", micro-batch " + std::to_string(m + 1) + " of " + std::to_string(batches.size());
          return st.with_context(where);
        }
      }
      return out;
    };

    const auto t_run = Clock::now();
    const int64_t total = online ? spec.rollout.steps : static_cast<int64_t>(plan.steps.size());
    for (int64_t step = 1; step <= total; ++step) {
      if (cancel.load()) return failed_precondition("cancelled");
      if (spec.max_seconds > 0 && seconds_since(t_start) > spec.max_seconds)
        return resource_exhausted("the job ran longer than its limit of " + std::to_string(static_cast<int64_t>(spec.max_seconds)) +
                                  " s (training.max_job_seconds) and stopped before step " + std::to_string(step) + " of " +
                                  std::to_string(total));
      const auto t_step = Clock::now();
      std::vector<Batch> batches;
      std::optional<double> mean_reward, reverse_kl;
      StepPhases phases;
      if (online) {
        // The step's groups, sampled from the adapter as it stands, then its log-probabilities of
        // them (the behaviour policy: rho = 1 in value at this step) through the trainer.
        Result<RolloutSource::Batch> drawn = spec.rollout.sample(step, adapter, cancel);
        if (!drawn.ok()) {
          if (cancel.load()) return failed_precondition("cancelled");
          return drawn.status().with_context("the rollout of step " + std::to_string(step) + " of " + std::to_string(total));
        }
        grpo = std::move(drawn->groups);
        mean_reward = drawn->mean_reward;
        phases.sampling = drawn->sampling_seconds;
        phases.scoring = drawn->scoring_seconds;
        phases.teacher = drawn->teacher_seconds;
        for (const GrpoGroup& g : grpo)
          for (const GrpoCompletion& c : g.completions)
            phases.sampled_tokens += std::count(c.sequence.roles.begin(), c.sequence.roles.end(), TokenRole::kTarget);
        items.clear();
        for (size_t g = 0; g < grpo.size(); ++g) {
          std::vector<double> r;
          for (const auto& c : grpo[g].completions) r.push_back(c.reward);
          if (spec.kind == TrainSpec::Kind::kOpd || grpo_advantages(r, spec.advantage)) items.push_back(g);
        }
        const auto t_behaviour = Clock::now();
        KILN_RETURN_IF_ERROR(record_behaviour_logp(*trainer, grpo, items, spec.batch_sequences, cancel, runner));
        phases.behaviour_logp = seconds_since(t_behaviour);
        if (spec.kind == TrainSpec::Kind::kOpd) reverse_kl = mean_reverse_kl(grpo);
        batches = rollout_batches(grpo, items, spec.batch_sequences);
      } else {
        for (const TrainPlan::MicroBatch& mb : plan.steps[static_cast<size_t>(step - 1)])
          batches.push_back(make_batch(mb, spec, items, grpo));
      }
      int64_t tokens = 0;
      for (const Batch& b : batches) tokens += b.tokens;
      StepOut out;
      // An online GRPO step whose groups all have equal rewards teaches nothing: no update.
      if (!batches.empty()) {
        KILN_ASSIGN_OR_RETURN(out, run_step(step, total, batches));
      } else {
        out.lr = static_cast<float>(scheduled_lr(spec.hyper.lr, spec.lr_schedule, step, total));
      }
      const double secs = seconds_since(t_step);
      result.losses.push_back(out.loss);
      result.grad_norms.push_back(out.clip.norm);
      result.lrs.push_back(out.lr);
      result.step_seconds.push_back(secs);
      phases.forward_backward = out.forward_backward;
      phases.optimizer = out.optimizer;
      phases.trained_tokens = tokens;
      result.step_phases.push_back(phases);
      result.tokens += tokens;
      if (mean_reward) result.rewards.push_back(*mean_reward);
      if (reverse_kl) result.reverse_kls.push_back(*reverse_kl);
      std::optional<double> eval_loss;
      if (!eval_batches.empty() && (step == total || (spec.eval_every > 0 && step % spec.eval_every == 0))) {
        KILN_ASSIGN_OR_RETURN(eval_loss, held_out_loss(step));
        result.eval_losses.push_back({step, *eval_loss});
      }
      if (progress) {
        TrainProgress p;
        p.step = step;
        p.total_steps = total;
        p.loss = out.loss;
        p.grad_norm = out.clip.norm;
        p.lr = out.lr;
        p.eval_loss = eval_loss;
        p.mean_reward = mean_reward;
        p.reverse_kl = reverse_kl;
        p.tokens_per_second = secs > 0 ? static_cast<double>(tokens) / secs : 0;
        progress(p);
      }
    }
    result.seconds = seconds_since(t_run);
  }
  result.adapter = std::move(adapter);
  return result;
}

}  // namespace kiln
