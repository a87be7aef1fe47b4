// `kiln bench train`: LoRA SFT throughput of one backend on one checkpoint (JSON): run_training on
// fixed pseudo-random token sequences (every token after the first half a target) or on a JSONL
// dataset of conversations (rendered with the checkpoint's tokenizer and chat template, cycled to
// fill the steps), the time of each optimizer step (forward, loss, backward, optimizer: the
// trainer's own timing), trained tokens per second, the loss of each step, and the device's peak
// memory, next to the FLOP roofline of a step at the H200's dense bf16 peak. With
// KILN_QUALIFICATION_CASE_RESULT set it also writes the qualification case result (the
// training-sft-cuda-v2 workload): first and final loss, step time, tokens/s. --method grpo|opd
// times an online iteration instead (cli/bench_train_online.h).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/bench_peer.h"
#include "cli/bench_roofline.h"
#include "cli/bench_train_online.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "model/qwen35.h"
#include "loadgen/serving_case_result.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/train_data.h"
#include "train/train_run.h"
#ifdef KILN_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#endif

namespace kiln::cli {

namespace {

struct TrainBenchOpts {
  std::string method = "sft", model, backend = "cpu", optimizer = "muon", out, dataset, peer_json;
  int64_t sequences = 4, seq_tokens = 512, steps = 5, rank = 16, checkpoint_every = 1;
  double trace_budget_gb = -1;
  uint64_t seed = 0;
};

// FLOPs of one trained token that training cannot do without: the forward (2 per matmul
// parameter) and the backward's dX = dY W (2 more; the LoRA factors' own products are negligible
// at rank << width): 4 per matmul parameter, the LM head included. A layer recomputed from its
// checkpoint (outside TrainerOptions::trace_budget_bytes) and the LM head's logits recomputed in
// the backward are overhead, not counted; attention's T^2 terms and the GDN recurrence are left
// out. So the roofline is an upper bound.
double flops_per_token(const ModelConfig& c, const ModelWeights& w) {
  return 2.0 * prefill_flops(c, w, 1);
}

Result<OptimizerKind> parse_optimizer(const std::string& s) {
  for (OptimizerKind k : {OptimizerKind::kMuon, OptimizerKind::kAdamW, OptimizerKind::kSgd})
    if (s == optimizer_kind_name(k)) return k;
  return invalid_argument("--optimizer " + s + ": expected muon, adam_w or sgd");
}

// The job: every LoRA target at --lora-rank, --steps batches of --sequences sequences, either
// pseudo-random tokens (the second half of each a target) or --dataset's conversations cycled.
Result<TrainSpec> bench_spec(const TrainBenchOpts& o, OptimizerKind opt, const std::string& dir, const ModelConfig& c) {
  TrainSpec spec;
  spec.lora.rank = o.rank;
  spec.lora.alpha = 2.0 * static_cast<double>(o.rank);
  for (int t = 0; t < kLoraTargetCount; ++t) spec.lora.targets.push_back(static_cast<LoraTarget>(t));
  spec.optimizer = opt;
  spec.epochs = o.steps;
  spec.batch_sequences = o.sequences;
  spec.trainer.checkpoint_every = o.checkpoint_every;
  if (o.trace_budget_gb >= 0) spec.trainer.trace_budget_bytes = static_cast<int64_t>(o.trace_budget_gb * 1e9);
  spec.seed = o.seed;
  if (o.dataset.empty()) {
    uint32_t x = 2024;
    for (int64_t s = 0; s < o.sequences; ++s) {
      TrainSequence seq;
      seq.tokens = bench_random_tokens(o.seq_tokens, c.vocab_size, x);
      for (int64_t t = 0; t < o.seq_tokens; ++t)
        seq.roles.push_back(t >= o.seq_tokens / 2 ? TokenRole::kTarget : TokenRole::kContext);
      spec.sft.push_back(std::move(seq));
    }
    return spec;
  }
  KILN_ASSIGN_OR_RETURN(Tokenizer tok, Tokenizer::load(dir));
  KILN_ASSIGN_OR_RETURN(ChatTemplate tmpl, ChatTemplate::load(dir));
  TrainDataContext ctx;
  ctx.tokenizer = &tok;
  ctx.chat_template = &tmpl;
  KILN_ASSIGN_OR_RETURN(std::vector<TrainSequence> data, sft_sequences_from_jsonl(o.dataset, ctx));
  // The conversations in file order, cycled until every step has its sequences: one epoch of
  // exactly `steps` batches.
  for (int64_t i = 0; i < o.steps * o.sequences; ++i) spec.sft.push_back(data[static_cast<size_t>(i) % data.size()]);
  spec.epochs = 1;
  return spec;
}

// The host's waits on the device so far (CUDA only): the run's share of them says host-bound or
// device-bound.
struct HostWaits {
  double seconds = 0;
  uint64_t synchronizations = 0;
};
HostWaits host_waits([[maybe_unused]] Backend& be) {
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(be); st.ok()) return {st->host_wait_seconds, st->synchronizations};
#endif
  return {};
}

// The CUDA backend's memory, launches and host waits over the run (null elsewhere).
nlohmann::json device_stats([[maybe_unused]] Backend& be, [[maybe_unused]] const HostWaits& before,
                            [[maybe_unused]] const TrainResult& r) {
#ifdef KILN_HAVE_CUDA
  if (auto st = cuda_backend_stats(be); st.ok()) {
    // Model load excluded: the waits are counted from before the first step.
    const double wait = st->host_wait_seconds - before.seconds;
    double sum_steps = 0;
    for (double s : r.step_seconds) sum_steps += s;
    return {{"device_pool_peak_in_use_bytes", st->pool_peak_in_use_bytes},
            {"device_pool_reserved_bytes", st->pool_reserved_bytes},
            {"launches", st->launches},
            {"synchronizations_per_step", static_cast<double>(st->synchronizations - before.synchronizations) /
                                              static_cast<double>(r.step_seconds.size())},
            {"host_wait_seconds", wait},
            {"host_wait_fraction_of_steps", wait / std::max(1e-9, sum_steps)},
            {"gdn_backward", st->gdn_backward}};
  }
#endif
  return nullptr;
}

// The qualification case result of the training-sft-cuda-v2 workload: first and final loss,
// step time, tokens/s, with the whole report as its details.
Status write_case_result(const char* path, const TrainBenchOpts& o, const Backend& be, const TrainResult& r,
                         double step_s, int64_t step_tokens, const nlohmann::json& report) {
  const bool finite = std::all_of(r.losses.begin(), r.losses.end(), [](double l) { return std::isfinite(l); });
  using loadgen::case_metric;
  const nlohmann::json doc = loadgen::case_result(
      "sft", finite && !r.losses.empty(), r.seconds,
      {{"backend", be.identity().name}, {"lora", {{"rank", o.rank}, {"targets", "all"}}}, {"optimizer", o.optimizer},
       {"sequences_per_step", o.sequences}},
      nlohmann::json::array({case_metric("final_loss", r.losses.back(), "nats"),
                             case_metric("first_loss", r.losses.front(), "nats"),
                             case_metric("step_time_ms", step_s * 1e3, "ms"),
                             case_metric("tokens_per_second", static_cast<double>(step_tokens) / step_s, "tok/s")}),
      report);
  return loadgen::write_case_result(path, doc);
}

Status run(const TrainBenchOpts& o) {
  if (o.sequences < 1 || o.seq_tokens < 2 || o.steps < 1 || o.rank < 1)
    return invalid_argument("--sequences, --steps and --lora-rank must be positive and --seq-tokens at least 2");
  KILN_ASSIGN_OR_RETURN(OptimizerKind opt, parse_optimizer(o.optimizer));
  nlohmann::json peer;  // read before training, so that a bad path costs nothing
  if (!o.peer_json.empty()) {
    KILN_ASSIGN_OR_RETURN(peer, read_peer_json(o.peer_json));
  }
  KILN_ASSIGN_OR_RETURN(std::string dir, resolve_model_dir(o.model));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(o.backend));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35Model> model, Qwen35Model::load(dir, *be));
  const ModelConfig& c = model->config();
  KILN_ASSIGN_OR_RETURN(TrainSpec spec, bench_spec(o, opt, dir, c));
  int64_t trained_tokens = 0;
  for (const auto& seq : spec.sft) trained_tokens += static_cast<int64_t>(seq.tokens.size());
  std::fprintf(stderr, "bench train: %lld steps of %lld sequences (%lld tokens in all), rank %lld, %s, on %s\n",
               static_cast<long long>(o.steps), static_cast<long long>(o.sequences),
               static_cast<long long>(trained_tokens * (o.dataset.empty() ? o.steps : 1)),
               static_cast<long long>(o.rank), o.optimizer.c_str(), be->identity().device_name.c_str());
  std::atomic<bool> cancel{false};
  auto progress = [](const TrainProgress& p) {
    std::fprintf(stderr, "\rbench train: step %lld/%lld  loss %.4f  %.0f tok/s ", static_cast<long long>(p.step),
                 static_cast<long long>(p.total_steps), p.loss, p.tokens_per_second);
    std::fflush(stderr);
  };
  const HostWaits waits_before = host_waits(*be);
  KILN_ASSIGN_OR_RETURN(TrainResult r, run_training(*model, spec, progress, cancel));
  std::fprintf(stderr, "\n");

  // Tokens a step trains on (forward and backward), averaged over the run's steps.
  const int64_t step_tokens = o.dataset.empty() ? o.sequences * o.seq_tokens : trained_tokens / o.steps;
  // The first step pays for allocations and plan creation: the median is over the others.
  std::vector<double> steady(r.step_seconds.begin() + (r.step_seconds.size() > 1 ? 1 : 0), r.step_seconds.end());
  std::sort(steady.begin(), steady.end());
  const double step_s = steady[steady.size() / 2];
  const double flops = flops_per_token(c, model->weights()) * static_cast<double>(step_tokens);
  nlohmann::json j = {{"kind", "train_sft"},
                      {"model", dir},
                      {"dataset", o.dataset.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.dataset)},
                      {"seed", o.seed},
                      {"backend", be->identity().name},
                      {"device", be->identity().device_name},
                      {"sequences_per_step", o.sequences},
                      {"tokens_per_sequence", o.dataset.empty() ? nlohmann::json(o.seq_tokens) : nlohmann::json(nullptr)},
                      {"tokens_per_step", step_tokens},
                      {"lora_rank", o.rank},
                      {"optimizer", o.optimizer},
                      {"checkpoint_every", o.checkpoint_every},
                      {"trace_budget_gb", o.trace_budget_gb},  // -1: half the device memory free at the start
                      {"step_seconds", r.step_seconds},
                      {"median_step_seconds", step_s},
                      {"tokens_per_s", static_cast<double>(step_tokens) / step_s},
                      {"losses", r.losses},
                      {"flops_per_step", flops},
                      {"tflop_s", flops / step_s / 1e12},
                      {"roofline_tokens_per_s_spec", kH200PeakBf16FlopPerS / (flops / static_cast<double>(step_tokens))},
                      {"fraction_of_spec_roofline", flops / step_s / kH200PeakBf16FlopPerS},
                      {"roofline_note", "4 FLOPs per matmul parameter per token (forward and dX; recomputation is "
                                        "overhead, not counted) at the H200's 989 TFLOP/s dense bf16; attention and "
                                        "GDN left out"}};
  if (!peer.is_null()) j["peer"] = std::move(peer);
  const MemoryUsage mem = be->memory_usage();
  j["memory"] = {{"used_bytes_at_end", mem.used_bytes}, {"total_bytes", mem.total_bytes}, {"what", mem.what}};
  if (nlohmann::json stats = device_stats(*be, waits_before, r); !stats.is_null()) j["cuda"] = std::move(stats);
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr)
    KILN_RETURN_IF_ERROR(write_case_result(path, o, *be, r, step_s, step_tokens, j));
  return emit_document(j, o.out);
}

}  // namespace

void add_bench_train_command(CLI::App& bench) {
  auto* cmd = bench.add_subcommand("train", "LoRA training throughput (JSON): SFT step time, trained tokens/s, loss "
                                             "and peak memory next to the FLOP roofline; or, with --method grpo|opd, an "
                                             "online iteration's phases (sampling, scoring, teacher, forward/backward, "
                                             "optimizer) and each part alone");
  auto o = std::make_shared<TrainBenchOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight 'small' "
                                  "checkpoint (grpo/opd: the 'demo' one, which has a tokenizer)");
  cmd->add_option("--backend", o->backend, "Backend to train on")->capture_default_str();
  cmd->add_option("--sequences", o->sequences, "sft: sequences per optimizer step")->capture_default_str();
  cmd->add_option("--seq-tokens", o->seq_tokens, "sft: tokens per random sequence (the second half are targets)")->capture_default_str();
  cmd->add_option("--steps", o->steps, "sft: optimizer steps (the first is left out of the median)")->capture_default_str();
  cmd->add_option("--lora-rank", o->rank, "LoRA rank (every target module)")->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "sft: JSONL of conversations ({\"messages\": [...]}) rendered with the model's "
                                           "tokenizer and chat template, cycled to fill the steps; default: random tokens");
  cmd->add_option("--seed", o->seed, "Seed of the adapter's init and the batch order")->capture_default_str();
  cmd->add_option("--optimizer", o->optimizer, "muon, adam_w or sgd")->capture_default_str();
  cmd->add_option("--checkpoint-every", o->checkpoint_every, "Layers per activation-checkpoint segment")->capture_default_str();
  cmd->add_option("--trace-budget-gb", o->trace_budget_gb,
                  "GB of layer traces the forward may keep so the backward need not recompute those layers "
                  "(0: recompute every layer; -1: half the device memory free when training starts)")
      ->capture_default_str()
      ->check(CLI::Range(-1.0, 1e6));
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->add_option("--peer-json", o->peer_json,
                  "JSON of a peer run (transformers + PEFT: tools/bench_hf_peer.py --train; for grpo/opd "
                  "tools/bench_hf_rl_peer.py), included as `peer`");
  // grpo / opd: an online iteration (cli/bench_train_online.h); its flags, and SFT's, are refused
  // under the other method.
  auto online = std::make_shared<OnlineTrainBenchOpts>();
  std::vector<CLI::Option*> online_only = {
      cmd->add_option("--prompts", online->prompts, "grpo/opd: prompts per iteration")->capture_default_str(),
      cmd->add_option("--group", online->group, "grpo/opd: completions sampled per prompt")->capture_default_str(),
      cmd->add_option("--max-tokens", online->max_tokens,
                      "grpo/opd: tokens per completion (end-of-text does not stop a completion: each has this many)")
          ->capture_default_str(),
      cmd->add_option("--prompt-tokens", online->prompt_tokens, "grpo/opd: tokens per random prompt")->capture_default_str(),
      cmd->add_option("--iterations", online->iterations, "grpo/opd: measured iterations (one warm-up iteration more)")
          ->capture_default_str(),
      cmd->add_option("--micro-batch", online->micro_batch,
                      "grpo/opd: sequences per micro-batch, whole groups (0: one group)")
          ->capture_default_str(),
      cmd->add_option("--tokenizer", online->tokenizer,
                      "grpo/opd: folder of tokenizer.json when the checkpoint has none beside it")};
  std::vector<CLI::Option*> sft_only = {cmd->get_option("--sequences"), cmd->get_option("--seq-tokens"),
                                        cmd->get_option("--steps"), cmd->get_option("--dataset")};
  cmd->add_option("--method", o->method,
                  "sft (steps over fixed sequences), or grpo / opd: online iterations, each sampling --prompts x "
                  "--group completions of --max-tokens through the serving engine with the adapter, scoring them "
                  "(grpo: the fraction of even token ids; opd: the base model as teacher) and one training step")
      ->capture_default_str();
  cmd->callback([o, online, online_only, sft_only] {
    if (o->method != "sft" && o->method != "grpo" && o->method != "opd")
      return report(invalid_argument("--method " + o->method + ": expected sft, grpo or opd"));
    const bool sft = o->method == "sft";
    for (CLI::Option* opt : sft ? online_only : sft_only)
      if (opt->count() > 0)
        return report(invalid_argument(opt->get_name() + " does not apply to --method " + o->method));
    if (sft) return report(run(*o));
    Result<OptimizerKind> opt = parse_optimizer(o->optimizer);
    if (!opt.ok()) return report(opt.status());
    online->opd = o->method == "opd";
    online->model = o->model;
    online->backend = o->backend;
    online->out = o->out;
    online->peer_json = o->peer_json;
    online->optimizer = *opt;
    online->rank = o->rank;
    online->checkpoint_every = o->checkpoint_every;
    online->trace_budget_gb = o->trace_budget_gb;
    online->seed = o->seed;
    report(run_online_train_bench(*online));
  });
}

}  // namespace kiln::cli
