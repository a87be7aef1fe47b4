#include "config/config_schema.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <type_traits>

namespace kiln {

namespace {

struct Limits {
  std::optional<Bound> min, max;
  std::vector<std::string_view> choices;
};

Limits at_least(double lo) { return {Bound{lo, true}, std::nullopt, {}}; }
Limits between(double lo, double hi) { return {Bound{lo, true}, Bound{hi, true}, {}}; }
Limits one_of(std::vector<std::string_view> choices) { return {std::nullopt, std::nullopt, std::move(choices)}; }

// A row whose type, getter and setter come from the member itself, so they cannot disagree with
// KilnConfig. A std::string member with choices is an enum.
template <auto Section, auto Member>
ConfigField make_field(std::string_view section, std::string_view key, std::string_view help, Limits limits = {}) {
  using T = std::remove_cvref_t<decltype(std::declval<KilnConfig&>().*Section.*Member)>;
  ConfigField f;
  f.section = section;
  f.key = key;
  f.help = help;
  f.min = limits.min;
  f.max = limits.max;
  f.choices = std::move(limits.choices);
  if constexpr (std::is_same_v<T, std::string>) f.type = f.choices.empty() ? FieldType::kString : FieldType::kEnum;
  else if constexpr (std::is_same_v<T, int64_t>) f.type = FieldType::kInteger;
  else if constexpr (std::is_same_v<T, double>) f.type = FieldType::kFloat;
  else if constexpr (std::is_same_v<T, bool>) f.type = FieldType::kBool;
  else static_assert(!sizeof(T), "configuration fields are std::string, int64_t, double or bool");
  f.get = [](const KilnConfig& c) -> ConfigValue { return c.*Section.*Member; };
  f.set = [](KilnConfig& c, const ConfigValue& v) { c.*Section.*Member = std::get<T>(v); };
  return f;
}

// A field whose value renderings hide (`kiln config`, GET /v1/config).
ConfigField secret(ConfigField f) {
  f.secret = true;
  return f;
}

// The dotted name is spelled by the member names themselves.
#define KILN_CONFIG_FIELD(section, key, ...)                                                          \
  make_field<&KilnConfig::section, &decltype(KilnConfig::section)::key>(#section, #key, __VA_ARGS__)

std::vector<ConfigField> build_schema() {
  return {
      KILN_CONFIG_FIELD(server, host, "Address the HTTP server listens on"),
      KILN_CONFIG_FIELD(server, port, "TCP port the HTTP server listens on; 0 picks a free one", between(0, 65535)),
      KILN_CONFIG_FIELD(server, max_batch_tokens, "Tokens per engine cycle, decode and prefill together", at_least(16)),
      KILN_CONFIG_FIELD(server, max_decode_batch, "Sequences decoding at once (GDN state slots in use)", between(1, 1024)),
      KILN_CONFIG_FIELD(server, max_queued_requests, "Requests waiting for admission; beyond it 503 with Retry-After", at_least(1)),
      KILN_CONFIG_FIELD(server, request_timeout_secs, "A request running longer is cancelled", at_least(1)),
      KILN_CONFIG_FIELD(server, max_body_bytes, "Request bodies larger than this get 413 (adapter uploads: max_adapter_bytes)",
                        at_least(1024)),
      KILN_CONFIG_FIELD(server, max_adapter_bytes,
                        "Largest adapter archive an upload may send, and may extract to; beyond it 413. Default 512 "
                        "MiB: a rank-64 f32 LoRA of Qwen3.5-4B on every target is 465 MiB (64 x 4 bytes x 1,904,640, "
                        "the inputs plus outputs of its 200 adapted projections), plus 10% for headers and receipts",
                        at_least(1024)),
      KILN_CONFIG_FIELD(server, http_threads, "HTTP worker threads; 0: max(8, 2 * max_decode_batch)", at_least(0)),
      KILN_CONFIG_FIELD(server, profile,
                        "Serving profile: stable (inference and training), experimental (also routes under "
                        "qualification), maintenance (no inference; training and adapter changes only)",
                        one_of({"stable", "experimental", "maintenance"})),
      secret(KILN_CONFIG_FIELD(server, api_key,
                               "Bearer key every route but /health and /ui/ requires; empty: none (refused unless "
                               "server.host is a loopback address)")),
      KILN_CONFIG_FIELD(server, api_key_file, "File holding server.api_key (its first line), so the key stays out of ps"),
      KILN_CONFIG_FIELD(server, metrics_public, "Serve /metrics without the API key"),
      KILN_CONFIG_FIELD(server, allowed_hosts,
                        "Host header values accepted besides localhost and this machine's addresses, comma-separated "
                        "(\".example.com\" also matches subdomains; \"*\": any); others get 421"),
      KILN_CONFIG_FIELD(server, allowed_origins,
                        "Origins that may call the API from a browser (CORS), comma-separated; other cross-origin "
                        "requests that change state get 403"),
      KILN_CONFIG_FIELD(server, state_dir,
                        "Folder of Kiln's writable state (adapters, datasets, eval suites, request log); empty: "
                        "~/.cache/kiln/state/<model id>"),
      KILN_CONFIG_FIELD(server, max_loaded_adapters,
                        "Adapters loaded at once; a load beyond it unloads the least recently used one other than "
                        "the default (507 when none can go)",
                        at_least(1)),
      KILN_CONFIG_FIELD(server, max_adapter_memory_bytes,
                        "Bytes of adapter factors loaded at once, with the same rule as max_loaded_adapters",
                        at_least(1 << 20)),
      KILN_CONFIG_FIELD(model, path, "Model directory, or a Hugging Face Hub name ORG/NAME[@REVISION] read from the Hugging Face cache and fetched into it when missing (docs/models.md); an existing directory wins; empty: the embedded random-weight demo model"),
      KILN_CONFIG_FIELD(model, served_model_id, "The id clients name in `model`; empty: the Hub name ORG/NAME when model.path is one, else the model directory's name"),
      KILN_CONFIG_FIELD(model, adapter_dir, "Folder of LoRA adapters; empty: adapters/ in server.state_dir"),
      KILN_CONFIG_FIELD(model, tokenizer_path, "Folder holding tokenizer.json; empty: the model directory"),
      KILN_CONFIG_FIELD(model, backend,
                        "Compute backend; auto: cuda when a device this build has code for is present, else a Vulkan GPU "
                        "(not a CPU driver), else cpu; "
                        "vulkan: the first Vulkan GPU (vulkan.device picks another)",
                        one_of({"auto", "cpu", "cuda", "vulkan"})),
      KILN_CONFIG_FIELD(model, max_context, "Longest sequence in tokens; 0: the model's max_position_embeddings, capped by the K/V pool",
                        at_least(0)),
      KILN_CONFIG_FIELD(memory, kv_blocks, "64-token K/V blocks to allocate; 0: sized from memory_fraction", at_least(0)),
      KILN_CONFIG_FIELD(memory, memory_fraction, "Share of free device memory (host: available RAM) given to K/V",
                        Limits{Bound{0, false}, Bound{1, true}, {}}),
      KILN_CONFIG_FIELD(memory, kv_cache_fp8, "Store K/V as e4m3 (CUDA only)"),
      KILN_CONFIG_FIELD(batching, channel_capacity, "Tokens buffered per request before its decoding pauses", at_least(1)),
      KILN_CONFIG_FIELD(prefix_cache, enabled, "Reuse K/V and GDN state of repeated prompt prefixes"),
      KILN_CONFIG_FIELD(prefix_cache, max_blocks, "Most K/V blocks the prefix cache holds", at_least(0)),
      KILN_CONFIG_FIELD(prefix_cache, max_bytes, "Most bytes the prefix cache holds (blocks and GDN snapshots)", at_least(0)),
      KILN_CONFIG_FIELD(training, webhook_url, "URL that receives a POST when a training job ends; empty: none"),
      KILN_CONFIG_FIELD(training, reward_url,
                        "http:// URL of the reward server that online GRPO and OPD jobs may ask for (reward.server in "
                        "the request): it gets a POST of each prompt, its reference and completions, and answers their "
                        "scores; empty: none"),
      KILN_CONFIG_FIELD(training, reward_timeout_seconds, "Timeout of one call to the reward server, in seconds",
                        between(1, 3600)),
      KILN_CONFIG_FIELD(training, reward_retries, "Further attempts after a failed call to the reward server",
                        between(0, 10)),
      KILN_CONFIG_FIELD(training, teacher_url,
                        "http:// base URL of an OpenAI-compatible server (another Kiln, or vLLM) that OPD jobs may "
                        "take as their teacher (teacher.remote in the request): Kiln POSTs token-id prompts to its "
                        "/v1/completions for their prompt_logprobs, after checking once per job that it uses the "
                        "student's tokenizer; empty: none"),
      KILN_CONFIG_FIELD(training, teacher_model, "The model the remote teacher's requests name; empty: none sent"),
      secret(KILN_CONFIG_FIELD(training, teacher_api_key,
                               "Bearer key sent to training.teacher_url; renderings show only whether it is set, "
                               "and no message or log carries it; empty: none")),
      KILN_CONFIG_FIELD(training, teacher_timeout_seconds, "Timeout of one call to the remote teacher, in seconds",
                        between(1, 3600)),
      KILN_CONFIG_FIELD(training, teacher_retries, "Further attempts after a failed call to the remote teacher",
                        between(0, 10)),
      KILN_CONFIG_FIELD(training, max_queued_jobs, "Training jobs that may wait in the queue", at_least(1)),
      KILN_CONFIG_FIELD(training, checkpoint_interval, "Optimizer steps between checkpoints; 0: none", at_least(0)),
      KILN_CONFIG_FIELD(training, checkpoint_keep,
                        "Checkpoints a job keeps on disk, the last ones; older ones are deleted as new ones land; 0: all",
                        at_least(0)),
      KILN_CONFIG_FIELD(training, trace_memory_fraction,
                        "Share of the training room a job's estimate leaves (on a host backend: of the memory "
                        "free when it starts) that it may keep as layer traces, sparing their recomputation "
                        "(faster, more memory); 0: recompute every layer",
                        Limits{Bound{0, true}, Bound{1, true}, {}}),
      KILN_CONFIG_FIELD(training, reserve_sequences,
                        "Sequences of the SFT step (of reserve_sequence_tokens each, at reserve_lora_rank on every "
                        "target, Muon) whose device memory the K/V pool leaves free; a larger job is refused when "
                        "posted if it does not fit; 0: the K/V pool leaves no room",
                        at_least(0)),
      KILN_CONFIG_FIELD(training, reserve_sequence_tokens, "Tokens of each sequence of the reserved SFT step",
                        at_least(2)),
      KILN_CONFIG_FIELD(training, reserve_lora_rank, "LoRA rank of the reserved SFT step", at_least(1)),
      KILN_CONFIG_FIELD(training, data_dir,
                        "Folder of training datasets (uploaded through /v1/datasets); a job's dataset_path must "
                        "name a file in it; empty: datasets/ in server.state_dir"),
      KILN_CONFIG_FIELD(training, max_dataset_bytes, "Largest dataset file a job reads or an upload writes", at_least(1024)),
      KILN_CONFIG_FIELD(training, max_job_tokens,
                        "Tokens one job may train on, every epoch counted; a larger job is refused when it is posted",
                        at_least(1)),
      KILN_CONFIG_FIELD(training, max_job_seconds, "A job still running after this many seconds fails", at_least(1)),
      KILN_CONFIG_FIELD(logging, level, "Least severe log level printed", one_of({"error", "warn", "info", "debug"})),
      KILN_CONFIG_FIELD(logging, request_log, "Record each request and its response in request_log_dir"),
      KILN_CONFIG_FIELD(logging, request_log_dir, "Folder of the request log; empty: request-log/ in server.state_dir"),
      KILN_CONFIG_FIELD(logging, request_log_max_bytes, "Most bytes the request log may hold", at_least(0)),
      KILN_CONFIG_FIELD(logging, request_log_redact,
                        "Request-log rows keep no message, prompt, completion or log-probability text (each becomes "
                        "\"[redacted: N bytes]\"); routes, status, timing, adapters and usage stay"),
      KILN_CONFIG_FIELD(vulkan, device,
                        "Vulkan device of --backend vulkan: an index in the loader's order or a substring of its "
                        "name; empty: the first discrete GPU, else an integrated one, else any (lavapipe, warned)"),
      KILN_CONFIG_FIELD(vulkan, validation, "Load the Khronos validation layer (debugging; refused where not installed)"),
  };
}

#undef KILN_CONFIG_FIELD

// 16 for 16.0, 0.5 for 0.5: bounds print without a fraction when they have none.
std::string format_number(double v) {
  if (std::floor(v) == v && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[64];
  auto [ptr, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ptr);
}

bool below(double v, const Bound& b) { return b.inclusive ? v < b.value : v <= b.value; }
bool above(double v, const Bound& b) { return b.inclusive ? v > b.value : v >= b.value; }

}  // namespace

std::string ConfigField::name() const { return std::string(section) + "." + std::string(key); }

std::string ConfigField::env_var() const {
  std::string out = "KILN_" + std::string(section) + "_" + std::string(key);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

ConfigValue ConfigField::default_value() const { return get(KilnConfig{}); }

std::string ConfigField::constraint() const {
  if (!choices.empty()) {
    std::string out;
    for (std::string_view c : choices) out += (out.empty() ? "" : " | ") + std::string(c);
    return out;
  }
  if (min && max && min->inclusive && max->inclusive) return format_number(min->value) + ".." + format_number(max->value);
  if (min && max)
    return std::string(min->inclusive ? "[" : "(") + format_number(min->value) + ", " + format_number(max->value) +
           (max->inclusive ? "]" : ")");
  if (min) return std::string(min->inclusive ? ">= " : "> ") + format_number(min->value);
  if (max) return std::string(max->inclusive ? "<= " : "< ") + format_number(max->value);
  return "";
}

Status ConfigField::check(const ConfigValue& value) const {
  if (!choices.empty()) {
    const std::string& s = std::get<std::string>(value);
    for (std::string_view c : choices)
      if (s == c) return {};
    std::string allowed;
    for (std::string_view c : choices) allowed += (allowed.empty() ? "" : ", ") + std::string(c);
    return invalid_argument("'" + s + "' is not one of " + allowed);
  }
  double v = 0;
  if (const int64_t* i = std::get_if<int64_t>(&value)) v = static_cast<double>(*i);
  else if (const double* d = std::get_if<double>(&value)) v = *d;
  else return {};
  if (!std::isfinite(v)) return invalid_argument(format_config_value(value) + " is not a finite number");
  if ((min && below(v, *min)) || (max && above(v, *max)))
    return invalid_argument(format_config_value(value) + " is out of range (allowed: " + constraint() + ")");
  return {};
}

const std::vector<ConfigField>& config_schema() {
  static const std::vector<ConfigField> schema = build_schema();
  return schema;
}

const ConfigField* find_config_field(std::string_view name) {
  for (const ConfigField& f : config_schema())
    if (name.size() == f.section.size() + 1 + f.key.size() && name.substr(0, f.section.size()) == f.section &&
        name[f.section.size()] == '.' && name.substr(f.section.size() + 1) == f.key)
      return &f;
  return nullptr;
}

const std::vector<std::string_view>& config_sections() {
  static const std::vector<std::string_view> sections = [] {
    std::vector<std::string_view> out;
    for (const ConfigField& f : config_schema())
      if (out.empty() || out.back() != f.section) out.push_back(f.section);
    return out;
  }();
  return sections;
}

}  // namespace kiln
