#include "server/train_request.h"


#include <algorithm>
#include <cmath>
#include <filesystem>
#include <cstdio>
#include <random>
#include <fstream>
#include <sstream>

#include "eval/suite.h"
#include "core/sha256.h"
#include "server/rollout_request.h"
#include "server/route_support.h"
#include "train/train_data.h"
#include "train/token_loss.h"
#include "train/train_memory.h"
#include "train/train_plan.h"

namespace kiln {

namespace {

const std::set<std::string> kLoraKeys = {"lora_rank", "lora_alpha", "learning_rate", "epochs", "optimizer",
                                         "output_name", "replace", "base_adapter", "auto_load", "seed", "checkpoint_interval",
                                         "batch_size", "target_modules", "post_eval", "exclude_suite",
                                         "max_grad_norm", "lr_schedule", "warmup_steps", "gradient_accumulation_steps",
                                         "max_seq_length", "eval_fraction", "eval_every"};
const std::set<std::string> kSftKeys = {"packing"};
const std::set<std::string> kGrpoKeys = {"advantage_mode", "clip_epsilon", "kl_coeff", "kl_estimator", "echo_lambda"};

// What the config asks for beyond TrainSpec and TrainJobRequest, used by the later steps.
struct ConfigRest {
  std::optional<std::string> exclude_suite;
  std::string base_adapter;
  bool replace = false;
  int64_t checkpoint_interval = 0;
  int64_t max_seq_length = 0;  // 0: none given (the served context bounds a sequence)
  bool packing = false;
};

// The field a train_data error names: its message starts with the JSON path ("examples[2]...")
// or "path:line" for a file.
std::string error_param(const std::string& message, const std::string& fallback) {
  if (message.rfind(fallback, 0) != 0) return fallback;
  const size_t end = message.find_first_of(": ");
  return end == std::string::npos ? message : message.substr(0, end);
}

// config.exclude_suite: drops every conversation that is one of the suite's examples (its prompt
// messages followed by the expected answer as the assistant's turn), so a held-out split made by
// POST /v1/eval/synthesize stays out of training.
std::optional<ApiError> exclude_suite_examples(const ServerContext& ctx, const std::string& name, const Json& examples,
                                               Json& kept) {
  Result<EvalSuite> suite = ctx.eval_suites ? ctx.eval_suites->load(name)
                                            : Result<EvalSuite>(not_found("no eval suite '" + name + "'"));
  if (!suite.ok()) {
    ApiError e = ApiError::invalid("config.exclude_suite", "no eval suite '" + name + "'");
    e.http_status = 404;
    e.code = "suite_not_found";
    return e;
  }
  std::set<std::string> held;
  for (const EvalExample& ex : suite->examples) {
    nlohmann::json conv = ex.messages;
    conv.push_back({{"role", "assistant"}, {"content", ex.expected}});
    held.insert(conv.dump());
  }
  kept = Json::array();
  for (const Json& e : examples)
    if (!(e.is_object() && e.contains("messages") && held.count(nlohmann::json(e["messages"]).dump()))) kept.push_back(e);
  if (kept.empty()) return ApiError::invalid("config.exclude_suite", "config.exclude_suite leaves no examples to train on");
  return std::nullopt;
}

void read_optimizer(FieldReader& cfg, TrainSpec& spec) {
  const Json* o = cfg.get("optimizer");
  if (!o) return;
  Json obj = o->is_string() ? Json{{"kind", *o}} : *o;
  FieldReader r(obj, cfg.path("optimizer"),
                {"kind", "momentum", "nesterov", "ns_steps", "beta1", "beta2", "eps", "weight_decay"});
  if (auto k = r.string("kind")) {
    if (*k == "muon") spec.optimizer = OptimizerKind::kMuon;
    else if (*k == "adam_w" || *k == "adamw") spec.optimizer = OptimizerKind::kAdamW;
    else if (*k == "sgd") spec.optimizer = OptimizerKind::kSgd;
    else r.fail("kind", r.path("kind") + " must be \"muon\", \"adam_w\" or \"sgd\", got \"" + *k + "\"");
  } else if (r.ok()) {
    r.fail("kind", r.path("kind") + " is required");
  }
  OptimizerHyper& h = spec.hyper;
  if (auto v = r.number("momentum", 0.0, 1.0)) h.momentum = static_cast<float>(*v);
  if (auto v = r.boolean("nesterov")) h.nesterov = *v;
  if (auto v = r.integer("ns_steps", 1, 20)) h.ns_steps = static_cast<int>(*v);
  if (auto v = r.number("beta1", 0.0, 1.0)) h.beta1 = static_cast<float>(*v);
  if (auto v = r.number("beta2", 0.0, 1.0)) h.beta2 = static_cast<float>(*v);
  if (auto v = r.number("eps", 0.0, 1.0, /*lo_open=*/true)) h.eps = static_cast<float>(*v);
  if (auto v = r.number("weight_decay", 0.0, 1.0)) h.weight_decay = static_cast<float>(*v);
  // Keep the nested field's name ("config.optimizer.kind") as the error's param.
  if (r.error()) cfg.fail(r.error()->param.substr(std::string("config.").size()), r.error()->message);
}

// The resolved hyperparameters, as the receipt records them.
Json hyperparameters(const TrainSpec& s, const ConfigRest& rest, bool auto_load, const std::string& output_name) {
  const std::string& base_adapter = rest.base_adapter;
  Json targets = Json::array();
  for (LoraTarget t : s.lora.targets) targets.push_back(std::string(lora_target_name(t)));
  Json j = {{"lora_rank", s.lora.rank},
            {"lora_alpha", s.lora.alpha},
            {"target_modules", targets},
            {"learning_rate", s.hyper.lr},
            {"epochs", s.epochs},
            {"batch_size", s.batch_sequences},
            {"seed", s.seed},
            {"optimizer",
             {{"kind", std::string(optimizer_kind_name(s.optimizer))},
              {"momentum", s.hyper.momentum},
              {"nesterov", s.hyper.nesterov},
              {"ns_steps", s.hyper.ns_steps},
              {"beta1", s.hyper.beta1},
              {"beta2", s.hyper.beta2},
              {"eps", s.hyper.eps},
              {"weight_decay", s.hyper.weight_decay}}},
            {"output_name", output_name},
            {"base_adapter", base_adapter.empty() ? Json(nullptr) : Json(base_adapter)},
            {"auto_load", auto_load},
            {"checkpoint_interval", rest.checkpoint_interval},
            {"max_grad_norm", s.max_grad_norm},
            {"lr_schedule", std::string(lr_schedule_name(s.lr_schedule.kind))},
            {"warmup_steps", s.lr_schedule.warmup_steps},
            {"gradient_accumulation_steps", s.accumulation_steps},
            {"max_seq_length", rest.max_seq_length > 0 ? Json(rest.max_seq_length) : Json(nullptr)},
            {"eval_fraction", s.eval_fraction},
            {"eval_every", s.eval_every}};
  if (s.kind == TrainSpec::Kind::kSft) j["packing"] = rest.packing;
  if (s.kind == TrainSpec::Kind::kOpd) {
    j["advantage_mode"] = s.advantage == AdvantageMode::kDrGrpo ? "dr_grpo" : "vanilla";
    j["reward_coeff"] = s.opd_reward_coeff;
  }
  if (s.kind == TrainSpec::Kind::kGrpo) {
    j["advantage_mode"] = s.advantage == AdvantageMode::kDrGrpo ? "dr_grpo" : "vanilla";
    j["clip_epsilon"] = s.clip_epsilon;
    j["kl_coeff"] = s.kl_coeff;
    j["kl_estimator"] = s.kl == KlEstimator::kNone ? "none" : s.kl == KlEstimator::kK1 ? "k1" : "k3";
    j["echo_lambda"] = s.echo_lambda;
  }
  return j;
}

// sha256 of the canonical form of the inline data: keys sorted, no whitespace.
std::string canonical_sha256(const Json& data) {
  return sha256_hex(nlohmann::json::parse(data.dump()).dump());
}

// Whether this server's backend trains; the LoRA ranks it takes narrow [min_rank, max_rank].
std::optional<ApiError> training_support(const ServerContext& ctx, int64_t& min_rank, int64_t& max_rank) {
  if (ctx.train_env.model == nullptr) return std::nullopt;
  const Backend& be = ctx.train_env.model->backend();
  const auto& t = be.capabilities().training;
  if (!t.supported) {
    ApiError e;
    e.http_status = 501;
    e.type = "server_error";
    e.code = "training_unsupported";
    e.message = "training is not supported on the " + be.identity().name +
                " backend yet (see `kiln capabilities`); serve with --backend cpu to train";
    return e;
  }
  if (t.muon_rank_min > 0) min_rank = t.muon_rank_min;
  if (t.muon_rank_max > 0) max_rank = t.muon_rank_max;
  return std::nullopt;
}

// config.post_eval, {suite, min_accuracy?}: the suite runs on the new adapter before auto_load
// (docs/evals.md).
std::optional<ApiError> read_post_eval(const ServerContext& ctx, FieldReader& c, TrainJobRequest& req) {
  const Json* pe = c.get("post_eval");
  if (pe == nullptr) return std::nullopt;
  if (!pe->is_object()) {
    c.fail("post_eval", "config.post_eval must be an object {suite, min_accuracy?}");
    return std::nullopt;
  }
  FieldReader p(*pe, "config.post_eval", {"suite", "min_accuracy"});
  auto suite = p.string("suite");
  auto min_acc = p.number("min_accuracy", 0.0, 1.0);
  if (!p.ok()) return p.error();
  if (!suite || suite->empty()) return ApiError::invalid("config.post_eval.suite", "config.post_eval.suite is required (a suite name)");
  if (!ctx.eval_suites || !ctx.eval_suites->load(*suite).ok()) {
    ApiError e = ApiError::invalid("config.post_eval.suite", "no eval suite '" + *suite + "'");
    e.http_status = 404;
    e.code = "suite_not_found";
    return e;
  }
  req.post_eval_suite = *suite;
  req.post_eval_min_accuracy = min_acc;
  return std::nullopt;
}

// config.target_modules: the projections the adapter adapts (default: every one).
void read_target_modules(FieldReader& c, LoraConfig& lora) {
  const Json* t = c.get("target_modules");
  if (t == nullptr) return;
  if (!t->is_array() || t->empty()) c.fail("target_modules", "config.target_modules must be a non-empty list of module names");
  std::vector<LoraTarget> targets;
  for (size_t i = 0; c.ok() && i < t->size(); ++i) {
    const Json& n = (*t)[i];
    auto target = n.is_string() ? parse_lora_target(n.get<std::string>()) : std::nullopt;
    if (!target) c.fail("target_modules", "config.target_modules[" + std::to_string(i) + "] is not a projection Kiln adapts (q_proj, k_proj, v_proj, o_proj, in_proj_qkv, in_proj_z, out_proj, gate_proj, up_proj, down_proj): " + n.dump());
    else if (std::find(targets.begin(), targets.end(), *target) == targets.end()) targets.push_back(*target);
  }
  std::sort(targets.begin(), targets.end());
  if (c.ok()) lora.targets = targets;
}

// GRPO's own settings: advantage, clipping, KL and echo.
void read_grpo_options(FieldReader& c, TrainSpec& spec) {
  if (auto v = c.string("advantage_mode")) {
    if (*v == "dr_grpo") spec.advantage = AdvantageMode::kDrGrpo;
    else if (*v == "vanilla") spec.advantage = AdvantageMode::kVanilla;
    else c.fail("advantage_mode", "config.advantage_mode must be \"dr_grpo\" or \"vanilla\", got \"" + *v + "\"");
  }
  if (auto v = c.number("clip_epsilon", 0.0, 1.0)) spec.clip_epsilon = static_cast<float>(*v);
  if (auto v = c.number("kl_coeff", 0.0, 100.0)) spec.kl_coeff = static_cast<float>(*v);
  if (auto v = c.string("kl_estimator")) {
    if (*v == "none") spec.kl = KlEstimator::kNone;
    else if (*v == "k1") spec.kl = KlEstimator::kK1;
    else if (*v == "k3") spec.kl = KlEstimator::kK3;
    else c.fail("kl_estimator", "config.kl_estimator must be \"k1\", \"k3\" or \"none\", got \"" + *v + "\"");
  }
  if (auto v = c.number("echo_lambda", 0.0, 100.0)) spec.echo_lambda = static_cast<float>(*v);
}

// The standard training controls: clipping, the learning-rate schedule, accumulation, the
// sequence length limit and packing, the held-out split.
void read_controls(const ServerContext& ctx, FieldReader& c, bool sft, TrainSpec& spec, ConfigRest& rest) {
  if (auto v = c.number("max_grad_norm", 0.0, 1e6)) spec.max_grad_norm = static_cast<float>(*v);
  if (auto v = c.string("lr_schedule")) {
    if (auto k = parse_lr_schedule(*v)) spec.lr_schedule.kind = *k;
    else c.fail("lr_schedule", "config.lr_schedule must be \"constant\", \"linear\" or \"cosine\", got \"" + *v + "\"");
  }
  if (auto v = c.integer("warmup_steps", 0, int64_t{1} << 40)) spec.lr_schedule.warmup_steps = *v;
  if (auto v = c.integer("gradient_accumulation_steps", 1, 4096)) spec.accumulation_steps = *v;
  if (auto v = c.integer("max_seq_length", 2, ctx.max_context > 0 ? ctx.max_context : int64_t{1} << 40))
    rest.max_seq_length = *v;
  if (sft) rest.packing = c.boolean("packing").value_or(false);
  if (auto v = c.number("eval_fraction", 0.0, 0.9)) spec.eval_fraction = *v;
  if (auto v = c.integer("eval_every", 0, int64_t{1} << 40)) spec.eval_every = *v;
  if (!c.ok()) return;
  if (rest.packing && rest.max_seq_length == 0)
    c.fail("packing", "config.packing needs config.max_seq_length: the most tokens a packed sequence holds");
  else if (spec.eval_every > 0 && spec.eval_fraction == 0)
    c.fail("eval_every", "config.eval_every needs config.eval_fraction > 0: nothing is held out to evaluate");
  spec.pack_tokens = rest.packing ? rest.max_seq_length : 0;
}

// The envelope: every config field, checked before any tokenizing.
std::optional<ApiError> read_config(const ServerContext& ctx, const Json& cfg, bool sft, int64_t min_rank,
                                    int64_t max_rank, TrainJobRequest& req, ConfigRest& rest, RolloutSettings* online) {
  TrainSpec& spec = req.spec;
  const bool opd = spec.kind == TrainSpec::Kind::kOpd;
  std::set<std::string> keys = kLoraKeys;
  if (sft) keys.insert(kSftKeys.begin(), kSftKeys.end());
  else if (opd) keys.insert("advantage_mode");
  else keys.insert(kGrpoKeys.begin(), kGrpoKeys.end());
  if (online) keys.insert(rollout_config_keys().begin(), rollout_config_keys().end());
  FieldReader c(cfg, "config", keys);
  if (online)  // an online step trains on its own rollout: no epochs, held-out split or packing
    for (const std::string& k : offline_only_config_keys())
      if (c.get(k)) c.fail(k, "config." + k + " does not apply to a job given prompts (each step trains on its own rollout)");
  if (auto v = c.integer("lora_rank", min_rank, max_rank)) spec.lora.rank = *v;
  if (auto v = c.number("lora_alpha", 0.0, 1e6, /*lo_open=*/true)) spec.lora.alpha = *v;
  if (auto v = c.number("learning_rate", 0.0, 10.0, /*lo_open=*/true)) spec.hyper.lr = static_cast<float>(*v);
  if (auto v = c.integer("epochs", 1, 10000)) spec.epochs = *v;
  if (auto v = c.integer("batch_size", 1, 4096)) spec.batch_sequences = *v;
  read_optimizer(c, spec);
  if (const Json* s = c.get("seed")) {
    if (s->is_number_unsigned()) spec.seed = s->get<uint64_t>();
    else if (s->is_number_integer() && s->get<int64_t>() >= 0) spec.seed = static_cast<uint64_t>(s->get<int64_t>());
    else c.fail("seed", "config.seed must be a non-negative integer, got " + s->dump());
  }
  rest.checkpoint_interval = ctx.config.training.checkpoint_interval;
  if (auto v = c.integer("checkpoint_interval", 0, int64_t{1} << 40)) rest.checkpoint_interval = *v;
  spec.checkpoint_interval = rest.checkpoint_interval;
  req.checkpoint_keep = ctx.config.training.checkpoint_keep;
  spec.trainer.trace_memory_fraction = ctx.config.training.trace_memory_fraction;
  if (auto v = c.boolean("auto_load")) req.auto_load = *v;
  rest.exclude_suite = c.string("exclude_suite");
  if (auto e = read_post_eval(ctx, c, req)) return e;
  read_target_modules(c, spec.lora);
  if (auto v = c.string("base_adapter")) rest.base_adapter = *v;
  if (auto v = c.string("output_name")) {
    if (Status st = AdapterRegistry::check_name(*v); !st.ok()) c.fail("output_name", "config.output_name: " + st.message());
    req.output_name = *v;
  }
  rest.replace = c.boolean("replace").value_or(false);
  if (!sft) read_grpo_options(c, spec);
  if (online) {
    online->seed = spec.seed;
    read_rollout_config(c, opd, *online, spec.rollout.steps, spec.opd_reward_coeff);
  }
  read_controls(ctx, c, sft, spec, rest);
  if (!c.ok()) return c.error();
  return std::nullopt;
}

// The adapter the job writes: the name given, or a fresh one so that a job never replaces an
// adapter by accident; an existing one only with "replace".
std::optional<ApiError> name_output(const ServerContext& ctx, bool replace, TrainJobRequest& req) {
  if (req.output_name.empty()) {
    char suffix[24];
    std::snprintf(suffix, sizeof suffix, "%08x", static_cast<unsigned>(std::random_device{}()));
    req.output_name = req.type + "-" + suffix;
  }
  if (std::error_code ec; !replace && std::filesystem::exists(std::filesystem::path(ctx.adapter_dir) / req.output_name, ec)) {
    return ApiError::conflict("config.output_name", "adapter '" + req.output_name + "' already exists in " +
                                                         ctx.adapter_dir + " (add \"replace\": true to the config)");
  }
  return std::nullopt;
}

// config.base_adapter: training continues from a loaded adapter's factors, so its shape is the job's.
std::optional<ApiError> resolve_base_adapter(const ServerContext& ctx, const std::string& name, TrainJobRequest& req) {
  if (name.empty()) return std::nullopt;
  Result<LoadedAdapter> base = ctx.adapters ? ctx.adapters->resolve(name)
                                            : Result<LoadedAdapter>(not_found("adapter '" + name + "' is not loaded"));
  if (!base.ok()) {
    ApiError e = ApiError::invalid("config.base_adapter", base.status().message());
    e.http_status = 404;
    e.code = "adapter_not_found";
    return e;
  }
  req.spec.lora = base->adapter->config();
  req.base_adapter = base->adapter;
  req.spec.base_adapter = req.base_adapter.get();
  return std::nullopt;
}

// config.eval_fraction must leave something to train on: of the sequences (SFT) or of the groups
// whose rewards are not all equal (GRPO; the others are left out of the run).
std::optional<ApiError> check_held_out(const TrainSpec& spec) {
  int64_t items = static_cast<int64_t>(spec.sft.size());
  for (const GrpoGroup& g : spec.grpo) {
    std::vector<double> rewards;
    for (const GrpoCompletion& c : g.completions) rewards.push_back(c.reward);
    items += grpo_advantages(rewards, spec.advantage).has_value();
  }
  const int64_t held = held_out_items(items, spec.eval_fraction);
  if (held > 0 && held >= items)
    return ApiError::invalid("config.eval_fraction",
                             "config.eval_fraction " + std::to_string(spec.eval_fraction) + " holds out " +
                                 std::to_string(held) + " of " + std::to_string(items) +
                                 (spec.kind == TrainSpec::Kind::kSft ? " examples" : " groups with unequal rewards") +
                                 ": none is left to train on");
  return std::nullopt;
}

// The training data, inline (`examples` or `groups`) or from dataset_path, tokenized into the spec.
std::optional<ApiError> read_data(const ServerContext& ctx, FieldReader& r, const std::string& data_field, bool sft,
                                  const ConfigRest& rest, TrainJobRequest& req) {
  TrainSpec& spec = req.spec;
  const std::optional<std::string>& exclude_suite = rest.exclude_suite;
  const Json* inline_data = r.get(data_field);
  auto path = r.string("dataset_path");
  if (!r.ok()) return r.error();
  Json kept;  // the inline examples left after config.exclude_suite
  if (exclude_suite) {
    if (!sft) return ApiError::invalid("config.exclude_suite", "config.exclude_suite applies to SFT jobs");
    if (!inline_data || !inline_data->is_array())
      return ApiError::invalid("config.exclude_suite", "config.exclude_suite needs inline examples (not dataset_path)");
    if (auto e = exclude_suite_examples(ctx, *exclude_suite, *inline_data, kept)) return e;
    inline_data = &kept;
  }
  if (inline_data && path) return ApiError::invalid("dataset_path", "give " + data_field + " or dataset_path, not both");
  if (!inline_data && !path) return ApiError::invalid(data_field, data_field + " is required (or dataset_path)");
  if (!ctx.tokenizer) return ApiError::from_status(failed_precondition("the server has no tokenizer"));
  if (sft && !ctx.chat_template)
    return ApiError::invalid(data_field, "the served model has no chat template, so conversations cannot be rendered");
  TrainDataContext dc;
  dc.tokenizer = ctx.tokenizer;
  dc.chat_template = ctx.chat_template;
  dc.max_tokens = ctx.max_context;
  dc.max_seq_length = rest.max_seq_length;
  Status data_status;
  if (inline_data) {
    if (!inline_data->is_array() || inline_data->empty())
      return ApiError::invalid(data_field, data_field + " must be a non-empty list");
    req.data_sha256 = canonical_sha256(*inline_data);
    if (sft) {
      auto seqs = sft_sequences(*inline_data, dc);
      if (seqs.ok()) spec.sft = std::move(*seqs);
      else data_status = seqs.status();
    } else {
      auto groups = grpo_groups(*inline_data, dc);
      if (groups.ok()) spec.grpo = std::move(*groups);
      else data_status = groups.status();
    }
    if (!data_status.ok()) return ApiError::invalid(error_param(data_status.message(), data_field), data_status.message());
  } else {
    auto file = dataset_file(ctx, *path);
    if (!file.ok()) return ApiError::invalid("dataset_path", file.status().message());
    path = *file;
    auto digest = sha256_file(*path);
    if (!digest.ok()) return ApiError::invalid("dataset_path", "dataset_path: " + digest.status().message());
    req.data_sha256 = digest->sha256;
    if (sft) {
      auto seqs = sft_sequences_from_jsonl(*path, dc);
      if (seqs.ok()) spec.sft = std::move(*seqs);
      else data_status = seqs.status();
    } else {
      auto groups = grpo_groups_from_jsonl(*path, dc);
      if (groups.ok()) spec.grpo = std::move(*groups);
      else data_status = groups.status();
    }
    if (!data_status.ok()) return ApiError::invalid("dataset_path", data_status.message());
  }
  if (sft && spec.sft.empty()) return ApiError::invalid(data_field, "no training sequences");
  if (!sft && spec.grpo.empty()) return ApiError::invalid(data_field, "no groups");
  return check_held_out(spec);
}

// The job's size against training.max_job_tokens, and its largest step against the room the K/V
// pool left (server/memory_plan.h): refused now rather than out of memory mid-run; its traces
// take a share of what it leaves.
std::optional<ApiError> admit(const ServerContext& ctx, TrainSpec& spec, const RolloutSettings* online) {
  int64_t tokens = 0;
  for (const TrainSequence& q : spec.sft) tokens += static_cast<int64_t>(q.tokens.size());
  for (const GrpoGroup& g : spec.grpo)
    for (const GrpoCompletion& c : g.completions) tokens += static_cast<int64_t>(c.sequence.tokens.size());
  // An online job, at its most: every completion as long as max_tokens allows, every step.
  TrainSpec shape_spec;
  if (online) {
    shape_spec.kind = spec.kind;
    shape_spec.batch_sequences = spec.batch_sequences;
    GrpoGroup& g = shape_spec.grpo.emplace_back();
    for (const RolloutPrompt& p : online->prompts) {
      const int64_t n = static_cast<int64_t>(p.tokens.size()) + online->max_tokens;
      tokens += n * online->group_size * spec.rollout.steps;
      if (g.completions.empty() || static_cast<int64_t>(g.completions[0].sequence.tokens.size()) < n)
        g.completions.assign(static_cast<size_t>(online->group_size), GrpoCompletion{});
      else continue;
      for (GrpoCompletion& c : g.completions) c.sequence.tokens.assign(static_cast<size_t>(n), 0);
    }
  }
  if (const int64_t most = ctx.config.training.max_job_tokens; tokens * spec.epochs > most)
    return ApiError::invalid(online ? "config.steps" : "config.epochs",
                             (online ? std::to_string(spec.rollout.steps) + " steps of up to " + std::to_string(tokens / spec.rollout.steps)
                                     : std::to_string(spec.epochs) + " epochs of " + std::to_string(tokens)) +
                                 " tokens pass training.max_job_tokens (" + std::to_string(most) + ")");
  if (ctx.train_env.model == nullptr) return std::nullopt;
  TrainJobShape shape;
  shape.sequence_tokens = largest_step_tokens(online ? shape_spec : spec);
  shape.lora = spec.lora;
  shape.optimizer = spec.optimizer;
  shape.kv_dtype = ctx.train_env.model->kv_dtype();
  const TrainAdmission a = admit_training(ctx.memory, estimate_train_memory(ctx.train_env.model->config(), shape),
                                          spec.trainer.trace_memory_fraction);
  if (a.refusal) {
    ApiError e;
    e.message = *a.refusal;
    e.http_status = 507;
    e.type = "server_error";
    e.code = "insufficient_device_memory";
    return e;
  }
  if (a.trace_budget_bytes) spec.trainer.trace_budget_bytes = *a.trace_budget_bytes;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_train_request(const ServerContext& ctx, TrainSpec::Kind kind, const Json& body,
                                            std::shared_ptr<TrainJobRequest>& out) {
  const bool sft = kind == TrainSpec::Kind::kSft, opd = kind == TrainSpec::Kind::kOpd;
  int64_t min_rank = 1, max_rank = int64_t{1} << 20;
  if (auto e = training_support(ctx, min_rank, max_rank)) return e;
  const std::string data_field = sft ? "examples" : "groups";
  // The online form: prompts the job samples from (GRPO: instead of groups; OPD: always).
  const bool online = opd || (!sft && body.is_object() && body.contains("prompts"));
  std::set<std::string> top = {data_field, "dataset_path", "config"};
  if (opd) top = {"prompts", "reward", "teacher", "config", "response_format"};
  else if (!sft) top.insert({"prompts", "reward", "response_format"});
  FieldReader r(body, "", top);
  if (!r.ok()) return r.error();
  if (online && !opd && (r.get(data_field) || r.get("dataset_path")))
    return ApiError::invalid("prompts", "give prompts or " + data_field + " (or dataset_path), not both");
  if (!online && r.get("reward"))
    return ApiError::invalid("reward", "reward applies to a job given prompts (finished groups carry their rewards)");
  if (!online && r.get("response_format"))
    return ApiError::invalid("response_format", "response_format constrains the rollouts of a job given prompts");
  auto req = std::make_shared<TrainJobRequest>();
  req->type = sft ? "sft" : opd ? "opd" : "grpo";
  req->spec.kind = kind;
  req->spec.lora.targets.clear();
  for (int t = 0; t < kLoraTargetCount; ++t) req->spec.lora.targets.push_back(static_cast<LoraTarget>(t));
  static const Json kEmpty = Json::object();
  const Json* cfg = r.get("config");
  ConfigRest rest;
  auto settings = online ? std::make_shared<RolloutSettings>() : nullptr;
  if (auto e = read_config(ctx, cfg ? *cfg : kEmpty, sft, min_rank, max_rank, *req, rest, settings.get())) return e;
  if (auto e = name_output(ctx, rest.replace, *req)) return e;
  if (Status st = req->spec.lora.validate("config"); !st.ok()) return ApiError::invalid("config", st.message());
  if (auto e = resolve_base_adapter(ctx, rest.base_adapter, *req)) return e;
  if (online) {
    settings->opd = opd;
    if (auto e = read_rollout_data(ctx, r, opd, *settings)) return e;
    req->data_sha256 = canonical_sha256(body);
    req->prompts = static_cast<int64_t>(settings->prompts.size());
    char nonce[24];
    std::snprintf(nonce, sizeof nonce, "%08x", static_cast<unsigned>(std::random_device{}()));
    settings->key = "rollout." + req->output_name + "." + nonce;
  } else if (auto e = read_data(ctx, r, data_field, sft, rest, *req)) {
    return e;
  }
  if (auto e = admit(ctx, req->spec, settings.get())) return e;
  // The sampler reaches the engine through the context the routes share (it outlives the jobs).
  if (online) req->spec.rollout = make_rollout_source(ctx, settings, req->spec.rollout.steps);
  req->spec.max_seconds = static_cast<double>(ctx.config.training.max_job_seconds);
  req->hyperparameters = hyperparameters(req->spec, rest, req->auto_load, req->output_name);
  if (online) {
    Json reward = nullptr;
    if (settings->scorer) reward = Json{{"scorer", settings->scorer->to_json()}};
    else if (settings->reward_server) reward = Json{{"server", settings->reward_server->url}};
    req->hyperparameters["rollout"] = {{"steps", req->spec.rollout.steps},     {"group_size", settings->group_size},
                                       {"temperature", settings->temperature}, {"top_p", settings->top_p},
                                       {"top_k", settings->top_k},             {"max_tokens", settings->max_tokens},
                                       {"enable_thinking", settings->enable_thinking}, {"reward", reward},
                                       {"response_format", settings->response_format}};
    if (opd) req->hyperparameters["rollout"]["teacher_adapter"] = settings->teacher_adapter.empty() ? Json(nullptr) : Json(settings->teacher_adapter);
    if (opd && settings->remote_teacher)  // the configured URL and model, never the key
      req->hyperparameters["rollout"]["teacher_remote"] = {{"url", settings->remote_teacher->endpoint.url},
                                                           {"model", settings->remote_teacher->model}};
  }
  out = std::move(req);
  return std::nullopt;
}

}  // namespace kiln
