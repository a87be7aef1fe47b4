#include "cli/bench_train_online.h"

#include <algorithm>
#include <cmath>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/bench_peer.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "core/temp_dir.h"
#include "loadgen/serving_case_result.h"
#include "model/state.h"
#include "server/rollout_service.h"
#include "server/server_context.h"
#include "server/serving_stack.h"
#include "train/train_run.h"

namespace kiln::cli {

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The built-in reward of a completion: the fraction of its tokens (kTarget) whose id is even. A
// deterministic function of the tokens, cheap, and spread enough over 256 sampled tokens that a
// group of 8 seldom ties (a tied group teaches GRPO nothing and is left out of the step).
double even_token_reward(const TrainSequence& q) {
  int64_t even = 0, n = 0;
  for (size_t t = 0; t < q.tokens.size(); ++t)
    if (q.roles[t] == TokenRole::kTarget) even += q.tokens[t] % 2 == 0, ++n;
  return n > 0 ? static_cast<double>(even) / static_cast<double>(n) : 0.0;
}

// What a phase took per iteration: seconds (mean over the measured iterations), its tokens, and
// their rate.
nlohmann::json phase(double seconds, int64_t tokens) {
  return {{"seconds", seconds},
          {"tokens", tokens},
          {"tokens_per_s", seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0}};
}

// The mean of `field` over the phases after the warm-up.
template <typename F>
double mean_after_warmup(const std::vector<StepPhases>& p, F field) {
  double sum = 0;
  for (size_t i = 1; i < p.size(); ++i) sum += field(p[i]);
  return p.size() > 1 ? sum / static_cast<double>(p.size() - 1) : 0.0;
}

}  // namespace

std::vector<int32_t> bench_random_tokens(int64_t n, int64_t vocab, uint32_t& state) {
  std::vector<int32_t> out;
  for (int64_t t = 0; t < n; ++t) {
    state = state * 1664525u + 1013904223u;
    out.push_back(static_cast<int32_t>((state >> 7) % static_cast<uint32_t>(vocab)));
  }
  return out;
}

Status check_online_train_bench(const OnlineTrainBenchOpts& o) {
  auto in = [](const char* flag, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v < lo || v > hi)
      return invalid_argument(std::string(flag) + " " + std::to_string(v) + ": expected " + std::to_string(lo) + " to " +
                              std::to_string(hi));
    return {};
  };
  KILN_RETURN_IF_ERROR(in("--prompts", o.prompts, 1, 256));
  KILN_RETURN_IF_ERROR(in("--group", o.group, 2, 64));
  KILN_RETURN_IF_ERROR(in("--max-tokens", o.max_tokens, 1, 32768));
  KILN_RETURN_IF_ERROR(in("--prompt-tokens", o.prompt_tokens, 1, 32768));
  KILN_RETURN_IF_ERROR(in("--iterations", o.iterations, 1, 1000));
  KILN_RETURN_IF_ERROR(in("--lora-rank", o.rank, 1, 1024));
  KILN_RETURN_IF_ERROR(in("--micro-batch", o.micro_batch, 0, 1 << 16));
  return {};
}

namespace {

// The qualification case result of a training-grpo workload (case id: the method): the mean
// iteration time, sampled and trained tokens/s, and the mean reward (grpo) or the last reverse KL
// (opd), with the whole report as its details. It passes when every loss and every reward or KL
// is finite.
nlohmann::json online_case_result(const OnlineTrainBenchOpts& o, const std::string& method, const std::string& backend,
                                  const TrainResult& run, const nlohmann::json& report) {
  using loadgen::case_metric;
  auto finite = [](const std::vector<double>& v) {
    return std::all_of(v.begin(), v.end(), [](double x) { return std::isfinite(x); });
  };
  const std::vector<double>& signal = o.opd ? run.reverse_kls : run.rewards;
  double mean_signal = 0;
  for (double x : signal) mean_signal += x / static_cast<double>(signal.size());
  const nlohmann::json& it = report["iteration"];
  nlohmann::json metrics = nlohmann::json::array(
      {case_metric("iteration_seconds", it["seconds"].get<double>(), "s"),
       o.opd ? case_metric("final_reverse_kl", signal.empty() ? 0.0 : signal.back(), "nats")
             : case_metric("mean_reward", mean_signal, "reward"),
       case_metric("sampled_tokens_per_second", it["sampled_tokens_per_s"].get<double>(), "tok/s"),
       case_metric("trained_tokens_per_second", it["trained_tokens_per_s"].get<double>(), "tok/s")});
  const bool ok = !run.losses.empty() && finite(run.losses) && !signal.empty() && finite(signal);
  double seconds = 0;
  for (double t : run.step_seconds) seconds += t;
  return loadgen::case_result(method, ok, seconds,
                              {{"backend", backend},
                               {"group_size", o.group},
                               {"lora", {{"rank", o.rank}, {"targets", "all"}}},
                               {"max_tokens", o.max_tokens},
                               {"method", method},
                               {"optimizer", std::string(optimizer_kind_name(o.optimizer))},
                               {"prompts", o.prompts}},
                              std::move(metrics), report);
}

}  // namespace

Status run_online_train_bench(const OnlineTrainBenchOpts& o) {
  KILN_RETURN_IF_ERROR(check_online_train_bench(o));
  nlohmann::json peer;  // read first, so that a bad path costs nothing
  if (!o.peer_json.empty()) {
    KILN_ASSIGN_OR_RETURN(peer, read_peer_json(o.peer_json));
  }
  // The demo model when none is named: its tokenizer is beside it (the rollout decodes text).
  std::string dir;
  if (o.model.empty()) {
    KILN_ASSIGN_OR_RETURN(dir, demo_model_dir());
  } else {
    KILN_ASSIGN_OR_RETURN(dir, resolve_model_dir(o.model));
  }
  // A folder of the bench's own for the stack's state (adapters, datasets), removed at the end.
  KILN_ASSIGN_OR_RETURN(TempDir state, TempDir::create("kiln-bench-train"));

  // The serving stack as `kiln serve` builds it, sized for the rollout: every completion decodes
  // at once, and the K/V pool holds them all (and no more, leaving the device to training).
  const int64_t rows = o.prompts * o.group;
  const int64_t context = o.prompt_tokens + o.max_tokens + 1;
  KilnConfig cfg;
  cfg.model.path = dir;
  cfg.model.backend = o.backend;
  cfg.model.tokenizer_path = o.tokenizer;
  cfg.model.max_context = context;
  cfg.server.host = "127.0.0.1";
  cfg.server.port = 0;
  cfg.server.state_dir = state.path();
  cfg.server.max_decode_batch = std::max<int64_t>(cfg.server.max_decode_batch, rows);
  cfg.server.max_queued_requests = std::max<int64_t>(cfg.server.max_queued_requests, rows);
  const int64_t blocks_per_row = (context + ModelState::kBlockSize - 1) / ModelState::kBlockSize;
  cfg.memory.kv_blocks = (rows + cfg.server.max_decode_batch / 4) * blocks_per_row;  // and room for cached prefixes
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<ServingStack> stack, ServingStack::start(cfg));
  const ServerContext& ctx = stack->context();

  // Random-token prompts from a fixed generator (the SFT bench's), the teacher's the same.
  auto settings = std::make_shared<RolloutSettings>();
  uint32_t x = 2024u + static_cast<uint32_t>(o.seed);
  for (int64_t p = 0; p < o.prompts; ++p) {
    RolloutPrompt rp;
    rp.messages = nlohmann::json::array();
    rp.tokens = bench_random_tokens(o.prompt_tokens, ctx.vocab_size, x);
    rp.teacher_tokens = rp.tokens;
    settings->prompts.push_back(std::move(rp));
  }
  settings->group_size = o.group;
  settings->max_tokens = o.max_tokens;
  settings->ignore_eos = true;
  settings->seed = o.seed;
  settings->opd = o.opd;
  const int64_t iterations = o.iterations + 1;  // the first warms up and is left out
  // The job's rollout source under prefix-cache key `key` (the parts alone take another, so that
  // no prefix the run cached is reused); GRPO's adds the built-in reward, timed as scoring.
  auto source_for = [&](const std::string& key) {
    auto s = std::make_shared<RolloutSettings>(*settings);
    s->key = key;
    RolloutSource src = make_rollout_source(ctx, std::move(s), iterations);
    if (o.opd) return src;
    src.sample = [inner = src.sample](int64_t step, const LoraAdapter& adapter,
                                      const std::atomic<bool>& cancel) -> Result<RolloutSource::Batch> {
      KILN_ASSIGN_OR_RETURN(RolloutSource::Batch b, inner(step, adapter, cancel));
      const auto t0 = Clock::now();
      double sum = 0;
      int64_t n = 0;
      for (GrpoGroup& g : b.groups)
        for (GrpoCompletion& c : g.completions) {
          c.reward = even_token_reward(c.sequence);
          sum += c.reward;
          ++n;
        }
      b.mean_reward = n > 0 ? sum / static_cast<double>(n) : 0.0;
      b.scoring_seconds += seconds_since(t0);
      return b;
    };
    return src;
  };

  TrainSpec spec;
  spec.kind = o.opd ? TrainSpec::Kind::kOpd : TrainSpec::Kind::kGrpo;
  spec.lora.rank = o.rank;
  spec.lora.alpha = 2.0 * static_cast<double>(o.rank);
  for (int t = 0; t < kLoraTargetCount; ++t) spec.lora.targets.push_back(static_cast<LoraTarget>(t));
  spec.optimizer = o.optimizer;
  spec.batch_sequences = o.micro_batch > 0 ? o.micro_batch : o.group;
  spec.trainer.checkpoint_every = o.checkpoint_every;
  if (o.trace_budget_gb >= 0) spec.trainer.trace_budget_bytes = static_cast<int64_t>(o.trace_budget_gb * 1e9);
  spec.seed = o.seed;
  spec.rollout = source_for("bench-train");

  const char* method = o.opd ? "opd" : "grpo";
  std::fprintf(stderr, "bench train: %s, %lld iterations (+1 warm-up) of %lld prompts x %lld completions x %lld tokens, "
                       "rank %lld, on %s\n",
               method, static_cast<long long>(o.iterations), static_cast<long long>(o.prompts),
               static_cast<long long>(o.group), static_cast<long long>(o.max_tokens), static_cast<long long>(o.rank),
               ctx.backend_impl ? ctx.backend_impl->identity().device_name.c_str() : ctx.backend.c_str());
  std::atomic<bool> cancel{false};
  auto progress = [](const char* what) {
    return [what](const TrainProgress& p) {
      std::fprintf(stderr, "\rbench train: %s %lld/%lld  loss %.4f ", what, static_cast<long long>(p.step),
                   static_cast<long long>(p.total_steps), p.loss);
      std::fflush(stderr);
    };
  };
  Qwen35Model& model = *ctx.train_env.model;
  KILN_ASSIGN_OR_RETURN(TrainResult run, run_training(model, spec, progress("iteration"), cancel, ctx.train_env.run_on_device));
  std::fprintf(stderr, "\n");

  // The parts alone: the same rollouts (the same steps' seeds) with nothing else running, then
  // training steps over the last of them (drawn already: no sampling in those steps).
  std::vector<StepPhases> alone(1);  // [0]: the warm-up's place, left out of the means like the run's
  RolloutSource::Batch last;
  const RolloutSource alone_source = source_for("bench-train-alone");
  for (int64_t step = 2; step <= iterations; ++step) {
    KILN_ASSIGN_OR_RETURN(last, alone_source.sample(step, run.adapter, cancel));
    StepPhases& a = alone.emplace_back();
    a.sampling = last.sampling_seconds, a.scoring = last.scoring_seconds, a.teacher = last.teacher_seconds;
  }
  TrainSpec training_alone = spec;
  training_alone.rollout.sample = [drawn = last](int64_t, const LoraAdapter&, const std::atomic<bool>&) {
    RolloutSource::Batch b = drawn;
    b.sampling_seconds = b.scoring_seconds = b.teacher_seconds = 0;
    return Result<RolloutSource::Batch>(std::move(b));
  };
  KILN_ASSIGN_OR_RETURN(TrainResult trained,
                        run_training(model, training_alone, progress("training step alone"), cancel, ctx.train_env.run_on_device));
  std::fprintf(stderr, "\n");

  const std::vector<StepPhases>& ph = run.step_phases;
  auto mean = [&](const std::vector<StepPhases>& p, double StepPhases::*f) {
    return mean_after_warmup(p, [f](const StepPhases& s) { return s.*f; });
  };
  std::vector<double> iteration_seconds(run.step_seconds.begin() + 1, run.step_seconds.end());
  double iteration_s = 0;
  for (double s : iteration_seconds) iteration_s += s;
  iteration_s /= static_cast<double>(iteration_seconds.size());
  std::vector<int64_t> sampled, trained_tokens;
  for (size_t i = 1; i < ph.size(); ++i) sampled.push_back(ph[i].sampled_tokens), trained_tokens.push_back(ph[i].trained_tokens);
  const int64_t sampled_tokens = sampled.front(), step_tokens = trained_tokens.front();
  const int64_t teacher_tokens = o.opd ? rows * (o.prompt_tokens + o.max_tokens) : 0;

  nlohmann::json phases = {
      {"sampling", phase(mean(ph, &StepPhases::sampling), sampled_tokens)},
      {"scoring", phase(mean(ph, &StepPhases::scoring), sampled_tokens)},
      {"behaviour_logprobs", phase(mean(ph, &StepPhases::behaviour_logp), step_tokens)},
      {"forward_backward", phase(mean(ph, &StepPhases::forward_backward), step_tokens)},
      {"optimizer", phase(mean(ph, &StepPhases::optimizer), step_tokens)}};
  if (o.opd) phases["teacher_scoring"] = phase(mean(ph, &StepPhases::teacher), teacher_tokens);
  const std::vector<StepPhases>& tp = trained.step_phases;
  const double training_alone_s =
      mean(tp, &StepPhases::behaviour_logp) + mean(tp, &StepPhases::forward_backward) + mean(tp, &StepPhases::optimizer);
  nlohmann::json parts = {{"sampling_seconds", mean(alone, &StepPhases::sampling)},
                          {"scoring_seconds", mean(alone, &StepPhases::scoring)},
                          {"training_step_seconds", training_alone_s},
                          {"training_step_seconds_each", std::vector<double>(trained.step_seconds.begin() + 1, trained.step_seconds.end())}};
  double parts_sum = parts["sampling_seconds"].get<double>() + parts["scoring_seconds"].get<double>() + training_alone_s;
  if (o.opd) {
    parts["teacher_scoring_seconds"] = mean(alone, &StepPhases::teacher);
    parts_sum += parts["teacher_scoring_seconds"].get<double>();
  }
  parts["sum_seconds"] = parts_sum;

  nlohmann::json j = {
      {"kind", o.opd ? "train_opd" : "train_grpo"},
      {"method", method},
      {"model", dir},
      {"seed", o.seed},
      {"backend", ctx.backend},
      {"device", ctx.backend_impl ? nlohmann::json(ctx.backend_impl->identity().device_name) : nlohmann::json(nullptr)},
      {"prompts", o.prompts},
      {"group_size", o.group},
      {"max_tokens", o.max_tokens},
      {"prompt_tokens", o.prompt_tokens},
      {"iterations", o.iterations},
      {"warmup_iterations", 1},
      {"lora_rank", o.rank},
      {"optimizer", std::string(optimizer_kind_name(o.optimizer))},
      {"sequences_per_micro_batch", spec.batch_sequences},
      {"checkpoint_every", o.checkpoint_every},
      {"trace_budget_gb", o.trace_budget_gb},
      {"iteration", {{"seconds", iteration_s},
                     {"seconds_each", iteration_seconds},
                     {"sampled_tokens", sampled_tokens},
                     {"sampled_tokens_each", sampled},
                     {"trained_tokens", step_tokens},
                     {"trained_tokens_each", trained_tokens},
                     {"sampled_tokens_per_s", static_cast<double>(sampled_tokens) / iteration_s},
                     {"trained_tokens_per_s", static_cast<double>(step_tokens) / iteration_s}}},
      {"phases", phases},
      {"parts_alone", parts},
      {"iteration_over_parts", iteration_s / parts_sum},
      {"losses", run.losses},
      {"note", std::string("random-token prompts from a fixed seed; completions sampled at temperature 1 without "
                           "stopping at end-of-text, so each has max_tokens tokens; ") +
                   (o.opd ? "the teacher is the base model (the engine's prompt log-probabilities of prompt + completion)"
                          : "reward: the fraction of a completion's token ids that are even; groups whose rewards tie "
                            "are left out of the step, as a job leaves them") +
                   "; forward_backward runs through the global gradient norm, optimizer is the clipped steps and the "
                   "gradients zeroed; parts alone: the same rollouts with nothing else running, and training steps over "
                   "one rollout drawn beforehand"}};
  if (o.opd) j["reverse_kls"] = run.reverse_kls;
  else j["rewards"] = run.rewards;
  if (!peer.is_null()) j["peer"] = std::move(peer);
  if (ctx.backend_impl) {
    const MemoryUsage mem = ctx.backend_impl->memory_usage();
    j["memory"] = {{"used_bytes_at_end", mem.used_bytes}, {"total_bytes", mem.total_bytes}, {"what", mem.what}};
  }
  stack->stop();
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr)
    KILN_RETURN_IF_ERROR(loadgen::write_case_result(path, online_case_result(o, method, ctx.backend, run, j)));
  return emit_document(j, o.out);
}

}  // namespace kiln::cli
