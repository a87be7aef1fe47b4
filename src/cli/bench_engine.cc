#include "cli/bench_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#include "core/temp_dir.h"
#include "engine/adapter_registry.h"
#include "engine/engine.h"
#include "grammar/matcher.h"

namespace kiln::cli {

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// A prompt no other bench prompt shares a prefix with (`salt` differs per sequence).
std::vector<int32_t> distinct_prompt(int64_t tokens, int64_t salt, int64_t vocab) {
  std::vector<int32_t> p(static_cast<size_t>(tokens));
  for (int64_t i = 0; i < tokens; ++i) p[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7919 + salt * 104729 + 13) % vocab);
  return p;
}

// Greedy without logprobs, or (temperature > 0) sampled with top_p from a fixed seed.
RequestSpec bench_request(std::vector<int32_t> prompt, int64_t max_tokens, float temperature, float top_p,
                          uint64_t seed) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = true;  // random weights may well produce an end-of-sequence id
  r.sampling.temperature = temperature;
  if (temperature > 0.f) r.sampling.top_p = top_p;
  r.sampling.logprobs = false;
  r.seed = seed;
  return r;
}

// An engine for `rows` sequences of up to `tokens` tokens each, with no prefix cache (every
// prompt must be computed).
Result<std::unique_ptr<Engine>> bench_engine(Qwen35Model& model, int64_t rows, int64_t tokens, int64_t chunk,
                                             const EngineBenchOpts& o, AdapterRegistry* adapters = nullptr) {
  EngineConfig ec;
  ec.adapters = adapters;
  ec.scheduler.max_running = rows;
  ec.scheduler.max_queue = rows;
  ec.scheduler.max_batch_tokens = std::max(chunk, rows);
  ec.kv_blocks = rows * ((tokens + ModelState::kBlockSize - 1) / ModelState::kBlockSize);
  ec.snapshot_slots = 0;
  ec.prefix_cache.enabled = false;
  ec.channel_capacity = static_cast<size_t>(tokens) + 8;  // never full: no backpressure pauses
  ec.device_sampling = o.device_sampling;
  ec.decode_replay = o.decode_replay;
  return Engine::create(model, std::move(ec));
}

// `n` random adapters of rank `rank` on every target, loaded as bench-0 ... bench-<n-1> (through a
// temporary PEFT directory each, as a server loads them). LoraAdapter::init leaves B zero; a fixed
// pattern of small values replaces it, so the deltas are real. The bytes a step reads per adapter
// go to `bytes_each`.
Result<std::unique_ptr<AdapterRegistry>> bench_adapters(Qwen35Model& model, int64_t n, int64_t rank,
                                                        int64_t* bytes_each) {
  if (n < 0 || rank < 1) return invalid_argument("bench: --adapters must be >= 0 and --adapter-rank >= 1");
  StorageFacet& storage = model.backend().storage();
  auto registry = std::make_unique<AdapterRegistry>(model.config(), storage);
  KILN_ASSIGN_OR_RETURN(TempDir tmp, TempDir::create("kiln-bench-adapters"));
  const std::filesystem::path root = tmp.path();
  LoraConfig cfg;
  cfg.rank = rank;
  cfg.alpha = 2.0 * static_cast<double>(rank);
  for (int t = 0; t < kLoraTargetCount; ++t) cfg.targets.push_back(static_cast<LoraTarget>(t));
  for (int64_t i = 0; i < n; ++i) {
    KILN_ASSIGN_OR_RETURN(LoraAdapter a, LoraAdapter::init(cfg, model.config(), static_cast<uint64_t>(i) + 1, storage));
    int64_t bytes = 0;
    for (int64_t l = 0; l < a.num_layers(); ++l)
      for (int t = 0; t < kLoraTargetCount; ++t) {
        LoraFactors& f = a.factors(l, static_cast<LoraTarget>(t));
        if (!f.defined()) continue;
        Tensor host = Tensor::empty(f.b.shape(), DType::kF32);
        for (int64_t k = 0; k < host.numel(); ++k)
          host.data<float>()[k] = 1e-3f * static_cast<float>((k * 7919 + i * 104729 + l * 31 + t) % 2001 - 1000) / 1000.f;
        KILN_RETURN_IF_ERROR(storage.copy_from_host(host, f.b));
        bytes += static_cast<int64_t>(f.a.nbytes() + f.b.nbytes());
      }
    *bytes_each = bytes;
    const std::filesystem::path dir = root / ("bench-" + std::to_string(i));
    KILN_RETURN_IF_ERROR(a.save(dir.string(), storage));
    KILN_RETURN_IF_ERROR(registry->load("bench-" + std::to_string(i), dir.string()).status());
  }
  return registry;
}

// Mask time over every constrained row of a run.
struct MaskClock {
  std::atomic<int64_t> ns{0}, masks{0};
};

// A grammar's documents back to back: where the text is complete, the stop ids are left out of
// the mask and the next document may begin (so every row decodes its max_tokens, as unconstrained
// bench rows do with ignore_eos). Each fill_mask is timed into `clock`.
class RepeatingGrammar final : public TokenConstraint {
 public:
  RepeatingGrammar(std::shared_ptr<const grammar::MaskCache> g, MaskClock& clock) : matcher_(std::move(g)), clock_(clock) {}
  Status fill_mask(std::span<uint32_t> words) override {
    const auto t = Clock::now();
    if (matcher_.is_complete() && !matcher_.can_continue()) matcher_.reset();
    KILN_RETURN_IF_ERROR(fill_without_stops(words));
    bool any = false;
    for (uint32_t w : words) any = any || w != 0;
    if (!any) {
      matcher_.reset();
      KILN_RETURN_IF_ERROR(fill_without_stops(words));
    }
    clock_.ns += std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t).count();
    ++clock_.masks;
    return {};
  }
  Status accept(int32_t token) override { return matcher_.accept_token(token); }
  bool mask_is_cheap() const override { return matcher_.mask_is_cached(); }

 private:
  Status fill_without_stops(std::span<uint32_t> words) {
    KILN_RETURN_IF_ERROR(matcher_.fill_mask(words));
    for (int32_t id : matcher_.vocabulary()->stop_ids()) words[static_cast<size_t>(id) >> 5] &= ~(1u << (id & 31));
    return {};
  }

  grammar::Matcher matcher_;
  MaskClock& clock_;
};

// Every event of a finished request: an error event fails the bench.
Status drain(TokenChannel& ch, int64_t* tokens) {
  while (auto e = ch.try_pop()) {
    if (e->finish == FinishReason::kError || e->finish == FinishReason::kCancelled)
      return internal_error("bench request ended early: " + e->error);
    if (e->token >= 0) ++*tokens;
  }
  return {};
}

}  // namespace

Result<nlohmann::json> bench_engine_decode(Qwen35Model& model, int64_t batch, const EngineBenchOpts& o) {
  if (batch < 1 || o.context < 1 || o.decode_steps < 1) return invalid_argument("bench: batch, context and steps must be positive");
  const int64_t V = model.config().vocab_size;
  // The first token comes from the prefill; then warm-up and timed steps. Rows whose prompts
  // prefill early decode while the others still prefill (one chunk of prompt tokens a cycle), so
  // each row decodes a token more per prefill cycle: when the last row has its first token,
  // every row still has the warm-up and timed steps to go.
  const int64_t prefill_cycles = (batch * o.context + o.prefill_chunk - 1) / o.prefill_chunk;
  const int64_t max_tokens = 1 + prefill_cycles + o.warmup_steps + o.decode_steps;
  int64_t adapter_bytes = 0;
  std::unique_ptr<AdapterRegistry> adapters;
  if (o.adapters > 0) {
    KILN_ASSIGN_OR_RETURN(adapters, bench_adapters(model, o.adapters, o.adapter_rank, &adapter_bytes));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        bench_engine(model, batch, o.context + max_tokens, o.prefill_chunk, o, adapters.get()));
  std::vector<Submission> subs;
  MaskClock masks;
  for (int64_t r = 0; r < batch; ++r) {
    RequestSpec spec = bench_request(distinct_prompt(o.context, batch * 1000 + r, V), max_tokens, o.temperature,
                                     o.top_p, static_cast<uint64_t>(r));
    if (adapters) spec.adapter = "bench-" + std::to_string(r % o.adapters);
    if (o.grammar) {
      spec.constraint = std::make_shared<RepeatingGrammar>(o.grammar, masks);
      spec.ignore_eos = false;  // the mask never allows a stop id
    }
    KILN_ASSIGN_OR_RETURN(Submission s, engine->submit(std::move(spec)));
    subs.push_back(std::move(s));
  }
  std::vector<double> steps;
  int64_t full_steps = 0, timed_mask_ns = 0;
  auto t_all = Clock::now();
  while (engine->has_work()) {
    auto t = Clock::now();
    const int64_t mask_ns = masks.ns.load();
    KILN_ASSIGN_OR_RETURN(CycleReport rep, engine->step());
    const double dt = seconds_since(t);
    if (rep.decode_rows == batch && rep.prefill_rows == 0 && full_steps++ >= o.warmup_steps &&
        static_cast<int64_t>(steps.size()) < o.decode_steps) {
      steps.push_back(dt);
      timed_mask_ns += masks.ns.load() - mask_ns;
    }
  }
  const double total = seconds_since(t_all);
  int64_t produced = 0;
  for (auto& s : subs) KILN_RETURN_IF_ERROR(drain(*s.channel, &produced));
  if (produced != batch * max_tokens)
    return internal_error("bench: " + std::to_string(produced) + " tokens produced, expected " + std::to_string(batch * max_tokens));
  if (steps.empty()) return internal_error("bench: no cycle decoded every sequence at once");
  double sum = 0;
  for (double s : steps) sum += s;
  std::vector<double> sorted = steps;
  std::sort(sorted.begin(), sorted.end());
  nlohmann::json out{{"batch", batch},
                        {"context", o.context},
                        {"prefill_cycles", prefill_cycles},
                        {"steps", static_cast<int64_t>(steps.size())},
                        {"seconds", sum},
                        {"step_ms_median", 1e3 * sorted[sorted.size() / 2]},
                        {"step_ms_max", 1e3 * sorted.back()},
                        {"tokens_per_s", static_cast<double>(batch) * static_cast<double>(steps.size()) / sum},
                        {"replayed_steps", engine->stats().decode_replays},
                        {"wall_seconds_with_prefill", total}};
  if (o.grammar) {
    out["mask_us_per_token"] = masks.masks > 0 ? 1e-3 * static_cast<double>(masks.ns) / static_cast<double>(masks.masks) : 0.0;
    out["mask_ms_per_step"] = 1e-6 * static_cast<double>(timed_mask_ns) / static_cast<double>(steps.size());
  }
  if (adapters) {
    out["adapters"] = o.adapters;
    out["adapter_rank"] = o.adapter_rank;
    out["adapter_bytes_per_step"] = std::min(o.adapters, batch) * adapter_bytes;
  }
  return out;
}

Result<nlohmann::json> bench_engine_ttft(Qwen35Model& model, int64_t tokens, int repeats, const EngineBenchOpts& o) {
  if (tokens < 1 || repeats < 1) return invalid_argument("bench: TTFT tokens and repeats must be positive");
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                        bench_engine(model, 1, tokens + 1, std::max(tokens, o.prefill_chunk), o));
  std::vector<double> ms;
  for (int rep = 0; rep <= repeats; ++rep) {  // rep 0 warms up
    const int64_t V = model.config().vocab_size;
    auto t = Clock::now();
    KILN_ASSIGN_OR_RETURN(Submission s, engine->submit(bench_request(distinct_prompt(tokens, 7 + rep, V), 1, 0.f, 1.f, 0)));
    std::optional<TokenEvent> first;
    while (!first && engine->has_work()) {
      KILN_RETURN_IF_ERROR(engine->step().status());
      first = s.channel->try_pop();
    }
    const double dt = 1e3 * seconds_since(t);
    if (!first || first->token < 0) return internal_error("bench: TTFT request produced no token");
    while (engine->has_work()) KILN_RETURN_IF_ERROR(engine->step().status());
    if (rep > 0) ms.push_back(dt);
  }
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  return nlohmann::json{{"tokens", tokens}, {"ms_median", sorted[sorted.size() / 2]}, {"ms_each", ms}};
}

}  // namespace kiln::cli
