// `kiln check state-slots`: one Engine, in process, through a declared request sequence that asks
// more of the GDN state-slot pool than it holds (more requests than running slots, prompts sharing
// a prefix-cache block, cancellations mid-decode, a refusal, arrivals interleaved with cycles).
// It prints the pool's telemetry (slots total / active / idle / cached, slot and recurrent-state
// bytes, the counters of engine/gdn_state_slots.h) and passes only when the accounting closes and
// every request's greedy tokens equal the same request run alone on a fresh engine (a request that
// differs reports where, and how near a tie the run alone had there). With
// KILN_QUALIFICATION_CASE_RESULT set it writes the case result of the state-slots-v1 workload.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/registry.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/out_file.h"
#include "engine/engine.h"
#include "loadgen/serving_case_result.h"
#include "model/qwen35.h"

namespace kiln::cli {

namespace {

constexpr int64_t kBlock = ModelState::kBlockSize;

struct StateSlotsOpts {
  std::string model, backend = "cpu", out, fault;
  uint64_t seed = 0;
  int64_t requests = 10, max_running = 3, snapshot_slots = 2, prompt_tokens = 96, max_tokens = 8;
};

Status check_opts(const StateSlotsOpts& o) {
  if (o.max_running < 1 || o.max_running > 64) return invalid_argument("--max-running must be in [1, 64]");
  if (o.requests <= o.max_running || o.requests > 256)
    return invalid_argument("--requests must be more than --max-running (" + std::to_string(o.max_running) +
                            ") and at most 256");
  if (o.snapshot_slots < 0 || o.snapshot_slots > 64) return invalid_argument("--snapshot-slots must be in [0, 64]");
  if (o.prompt_tokens <= kBlock || o.prompt_tokens > 4096)
    return invalid_argument("--prompt-tokens must be in [" + std::to_string(kBlock + 1) +
                            ", 4096]: the shared prefix is one whole 64-token block");
  if (o.max_tokens < 2 || o.max_tokens > 1024) return invalid_argument("--max-tokens must be in [2, 1024]");
  if (!o.fault.empty() && o.fault != "leak" && o.fault != "mismatch")
    return invalid_argument("--inject-fault " + o.fault + ": expected leak or mismatch");
  return {};
}

// Request i of the declared sequence.
struct Planned {
  RequestSpec spec;
  bool cancel = false;  // cancelled once it has generated half its tokens
};

RequestSpec greedy(std::vector<int32_t> prompt, int64_t max_tokens, uint64_t seed) {
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0.f;
  r.ignore_eos = true;  // every request runs its whole length: the counters do not depend on the tokens
  r.seed = seed;
  return r;
}

// Even requests share their first block (a prefix-cache snapshot, then restores), odd ones are
// their own; every fourth is cancelled mid-decode. Token ids are drawn from the seed.
std::vector<Planned> plan(const StateSlotsOpts& o, int64_t vocab) {
  std::mt19937_64 rng(o.seed);
  std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(std::min<int64_t>(vocab, 1 << 30) - 1));
  std::vector<int32_t> shared(kBlock);
  for (auto& t : shared) t = token(rng);
  std::vector<Planned> out;
  for (int64_t i = 0; i < o.requests; ++i) {
    std::vector<int32_t> p = i % 2 == 0 ? shared : std::vector<int32_t>{};
    while (static_cast<int64_t>(p.size()) < o.prompt_tokens) p.push_back(token(rng));
    out.push_back({greedy(std::move(p), o.max_tokens, o.seed + static_cast<uint64_t>(i)), i % 4 == 3});
  }
  return out;
}

EngineConfig engine_config(const StateSlotsOpts& o) {
  EngineConfig c;
  c.scheduler.max_running = o.max_running;
  c.scheduler.max_queue = o.requests + 2;
  c.snapshot_slots = o.snapshot_slots;
  // Room for every running request (a fault's extra one included) and a cached prefix per snapshot slot.
  c.kv_blocks = (o.max_running + o.snapshot_slots + 1) * BlockManager::blocks_for(o.prompt_tokens + 2 * o.max_tokens + 4);
  // Every event of a request fits (its tokens and the finishing one); a request not read pauses.
  c.channel_capacity = static_cast<size_t>(o.max_tokens + 2);
  c.model_identity = "check-state-slots";
  return c;
}

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<std::vector<TokenLogprob>> top;  // each token's alternatives, when asked for
  FinishReason finish = FinishReason::kNone;
  std::string error;
};

void drain(TokenChannel& ch, Outcome& out) {
  while (auto e = ch.try_pop()) {
    if (e->token >= 0) {
      out.tokens.push_back(e->token);
      out.top.push_back(e->top_logprobs);
    }
    if (e->finish != FinishReason::kNone) {
      out.finish = e->finish;
      out.error = e->error;
    }
  }
}

// The request alone on a fresh engine of the same configuration.
Result<Outcome> alone(Qwen35Model& model, const EngineConfig& config, const RequestSpec& spec) {
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::create(model, config));
  KILN_ASSIGN_OR_RETURN(Submission s, e->submit(spec));
  Outcome out;
  while (e->has_work()) {
    KILN_RETURN_IF_ERROR(e->step().status());
    drain(*s.channel, out);
  }
  drain(*s.channel, out);
  if (out.finish != FinishReason::kLength)
    return internal_error("the reference run of a request ended '" + std::string(finish_reason_name(out.finish)) +
                          "' " + out.error);
  return out;
}

// Where a request's tokens part from its run alone, and how close the alone run's choice was
// there: run alone again with the two likeliest tokens of each step, and take the logprob of the
// token it chose minus that of the token the batch chose (a near-tie is a gap that batch-size
// rounding can flip; null when the batch's token is not among the two).
Result<nlohmann::json> divergence(Qwen35Model& model, const EngineConfig& config, RequestSpec spec,
                                  const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t d = 0;
  while (d < got.size() && d < want.size() && got[d] == want[d]) ++d;
  if (d == got.size() || d == want.size()) return nlohmann::json{{"diverges_at", nullptr}};
  spec.sampling.top_logprobs = 2;
  KILN_ASSIGN_OR_RETURN(Outcome again, alone(model, config, spec));
  nlohmann::json gap = nullptr;
  const std::vector<TokenLogprob> none;
  const std::vector<TokenLogprob>& top = d < again.top.size() ? again.top[d] : none;
  auto lp = [&](int32_t t) -> const TokenLogprob* {
    for (const TokenLogprob& x : top)
      if (x.token == t) return &x;
    return nullptr;
  };
  if (const TokenLogprob *a = lp(want[d]), *b = lp(got[d]); a != nullptr && b != nullptr) gap = a->logprob - b->logprob;
  return nlohmann::json{{"diverges_at", d},
                        {"token", got[d]},
                        {"alone_token", want[d]},
                        {"alone_logprob_gap", gap},
                        {"alone_repeats", again.tokens == want}};
}

Status run(const StateSlotsOpts& o) {
  KILN_RETURN_IF_ERROR(check_opts(o));
  std::string dir;
  if (o.model.empty()) {
    KILN_ASSIGN_OR_RETURN(dir, demo_model_dir());  // what `kiln serve` runs by default
  } else {
    KILN_ASSIGN_OR_RETURN(dir, resolve_model_dir(o.model));
  }
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, create_backend(o.backend));
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Qwen35Model> model, Qwen35Model::load(dir, *be));
  const EngineConfig config = engine_config(o);
  std::vector<Planned> requests = plan(o, model->config().vocab_size);
  KILN_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(*model, config));
  const auto started = std::chrono::steady_clock::now();

  // Arrivals: request i before cycle i, and before the first cycle one request whose prompt alone
  // is longer than the K/V cache (the engine's padding block included), which it must refuse. The leak fault adds a request at cycle 0
  // whose events are never read: its decoding pauses with its slot held.
  std::vector<Submission> subs(requests.size());
  std::vector<Outcome> outs(requests.size());
  std::vector<bool> cancelled(requests.size(), false);
  std::string refusal;
  Submission held;
  int64_t cycles = 0, peak_active = 0;
  std::string step_error;
  auto finished = [&] {
    for (size_t i = 0; i < outs.size(); ++i)
      if (!subs[i].channel || outs[i].finish == FinishReason::kNone) return false;
    return true;
  };
  for (; cycles < 100000 && !finished(); ++cycles) {
    if (cycles == 0) {
      std::vector<int32_t> long_prompt(static_cast<size_t>((config.kv_blocks + 1) * kBlock), requests[0].spec.prompt[1]);
      auto r = engine->submit(greedy(std::move(long_prompt), o.max_tokens, o.seed));
      if (r.ok()) r->channel->cancel();
      else if (r.status().code() == ErrorCode::kInvalidArgument) refusal = r.status().to_string();
      if (o.fault == "leak") {
        RequestSpec spec = requests[1].spec;
        spec.max_tokens = 2 * o.max_tokens + 4;
        KILN_ASSIGN_OR_RETURN(held, engine->submit(std::move(spec)));
      }
    }
    if (cycles < static_cast<int64_t>(requests.size())) {
      KILN_ASSIGN_OR_RETURN(subs[cycles], engine->submit(requests[cycles].spec));
    }
    if (auto step = engine->step(); !step.ok()) {
      step_error = step.status().to_string();
      break;
    }
    const EngineStats s = engine->stats();
    peak_active = std::max(peak_active, s.total_slots - s.free_slots - s.cached_snapshots);
    for (size_t i = 0; i < requests.size(); ++i) {
      if (!subs[i].channel) continue;
      drain(*subs[i].channel, outs[i]);
      if (requests[i].cancel && !cancelled[i] && 2 * static_cast<int64_t>(outs[i].tokens.size()) >= o.max_tokens) {
        subs[i].channel->cancel();
        cancelled[i] = true;
      }
    }
  }
  const EngineStats s = engine->stats();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();

  // Continuity: a completed request's tokens equal its run alone; a cancelled one's are a prefix.
  int64_t completed = 0, cancelled_n = 0, mismatches = 0, errored = 0;
  nlohmann::json per_request = nlohmann::json::array();
  for (size_t i = 0; i < requests.size(); ++i) {
    KILN_ASSIGN_OR_RETURN(Outcome reference, alone(*model, config, requests[i].spec));
    std::vector<int32_t>& want = reference.tokens;
    if (o.fault == "mismatch" && i == 0) {
      // The reference's first token becomes the run alone's second likeliest: a near-tie flipped.
      RequestSpec spec = requests[0].spec;
      spec.sampling.top_logprobs = 2;
      KILN_ASSIGN_OR_RETURN(Outcome two, alone(*model, config, spec));
      want[0] = two.top[0].size() > 1 && two.top[0][1].token != want[0]
                    ? two.top[0][1].token
                    : (want[0] + 1) % static_cast<int32_t>(model->config().vocab_size);
    }
    const Outcome& got = outs[i];
    bool ok = false;
    if (got.finish == FinishReason::kLength) {
      ++completed;
      ok = got.tokens == want;
    } else if (got.finish == FinishReason::kCancelled && requests[i].cancel) {
      ++cancelled_n;
      ok = !got.tokens.empty() && got.tokens.size() < want.size() && std::equal(got.tokens.begin(), got.tokens.end(), want.begin());
    } else {
      ++errored;
    }
    nlohmann::json row = {{"prompt_tokens", requests[i].spec.prompt.size()},
                          {"shares_prefix", i % 2 == 0},
                          {"finish", finish_reason_name(got.finish)},
                          {"tokens", got.tokens.size()},
                          {"equal_to_alone", ok}};
    if (!ok) {
      ++mismatches;
      KILN_ASSIGN_OR_RETURN(nlohmann::json where, divergence(*model, config, requests[i].spec, got.tokens, want));
      row.update(where);
    }
    per_request.push_back(std::move(row));
  }

  const GdnSlotCounters& g = s.slot_counters;
  const int64_t idle = s.free_slots, cached = s.cached_snapshots;
  const int64_t active = s.total_slots - idle - cached;
  const int64_t leaked = active;  // every declared request has finished: no slot should be held
  const bool sequence_closed = g.acquisitions + g.restores == g.sequence_releases;
  const bool cache_closed = g.snapshots == g.cache_releases + cached;
  const bool refused = !refusal.empty();
  const bool passed = sequence_closed && cache_closed && leaked == 0 && mismatches == 0 && errored == 0 &&
                      step_error.empty() && refused;
  nlohmann::json j = {
      {"kind", "check_state_slots"},
      {"model", dir},
      {"backend", be->identity().name},
      {"device", be->identity().device_name},
      {"seed", o.seed},
      {"sequence",
       {{"requests", o.requests},
        {"max_running", o.max_running},
        {"snapshot_slots", o.snapshot_slots},
        {"prompt_tokens", o.prompt_tokens},
        {"max_tokens", o.max_tokens},
        {"kv_blocks", config.kv_blocks},
        {"cycles", cycles},
        {"fault", o.fault.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.fault)}}},
      {"slots",
       {{"total", s.total_slots},
        {"active", active},
        {"idle", idle},
        {"cached", cached},
        {"peak_active", peak_active},
        {"slot_bytes", s.slot_bytes},
        {"state_bytes_in_use", (active + cached) * s.slot_bytes},
        {"peak_active_state_bytes", peak_active * s.slot_bytes}}},
      {"counters",
       {{"acquisitions", g.acquisitions},
        {"restores", g.restores},
        {"snapshots", g.snapshots},
        {"sequence_releases", g.sequence_releases},
        {"cache_releases", g.cache_releases},
        {"failures", g.failures},
        {"prefix_hits", s.prefix_hits},
        {"prefix_misses", s.prefix_misses}}},
      {"accounting",
       {{"sequence_slots_closed", sequence_closed},
        {"snapshots_closed", cache_closed},
        {"leaked_slots", leaked}}},
      {"continuity",
       {{"completed", completed},
        {"cancelled", cancelled_n},
        {"errored", errored},
        {"mismatches", mismatches},
        {"requests", per_request}}},
      {"refusal", refused ? nlohmann::json(refusal) : nlohmann::json(nullptr)},
      {"step_error", step_error.empty() ? nlohmann::json(nullptr) : nlohmann::json(step_error)},
      {"passed", passed}};
  if (const char* path = std::getenv("KILN_QUALIFICATION_CASE_RESULT"); path != nullptr) {
    using loadgen::case_metric;
    const nlohmann::json metrics = nlohmann::json::array(
        {case_metric("acquisitions", g.acquisitions, "count"), case_metric("cache_releases", g.cache_releases, "count"),
         case_metric("continuity_mismatches", mismatches, "count"), case_metric("failures", g.failures, "count"),
         case_metric("leaked_slots", leaked, "count"), case_metric("peak_active_slots", peak_active, "count"),
         case_metric("restores", g.restores, "count"), case_metric("sequence_releases", g.sequence_releases, "count"),
         case_metric("snapshots", g.snapshots, "count")});
    const nlohmann::json config = {{"backend", o.backend},         {"max_running", o.max_running},
                                   {"max_tokens", o.max_tokens},   {"prompt_tokens", o.prompt_tokens},
                                   {"requests", o.requests},       {"snapshot_slots", o.snapshot_slots}};
    KILN_RETURN_IF_ERROR(
        loadgen::write_case_result(path, loadgen::case_result("state-slots", passed, seconds, config, metrics, j)));
  }
  KILN_RETURN_IF_ERROR(emit_document(j, o.out));
  if (!passed) return failed_precondition("state-slots check failed: see accounting, continuity and refusal above");
  return {};
}

}  // namespace

void add_check_state_slots_command(CLI::App& check) {
  auto* cmd = check.add_subcommand(
      "state-slots",
      "GDN state-slot ownership: one engine through a request sequence larger than its slot pool (queueing, "
      "a shared prompt prefix restored from prefix-cache snapshots, every fourth request cancelled mid-decode, a "
      "request longer than the K/V cache refused, one arrival a cycle); passes when acquisitions + restores == "
      "releases by sequences, snapshots == cache releases + cached, no slot is left held, the long request was "
      "refused, and every request's greedy tokens equal its run alone on a fresh engine (a cancelled one's, a "
      "prefix of them)");
  auto o = std::make_shared<StateSlotsOpts>();
  cmd->add_option("--model", o->model, "Checkpoint folder or Hub name ORG/NAME[@REVISION]; default: the random-weight "
                                       "'demo' checkpoint that kiln serve runs");
  cmd->add_option("--backend", o->backend, "Backend to run on")->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of the prompts' token ids")->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests in the sequence (more than --max-running)")->capture_default_str();
  cmd->add_option("--max-running", o->max_running, "Sequences the engine runs at once (its slots for sequences)")
      ->capture_default_str();
  cmd->add_option("--snapshot-slots", o->snapshot_slots, "GDN slots beyond --max-running, for prefix-cache snapshots")
      ->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens,
                  "Tokens of each prompt (even requests share the first 64)")->capture_default_str();
  cmd->add_option("--max-tokens", o->max_tokens, "Tokens each request generates (greedy, EOS ignored)")->capture_default_str();
  cmd->add_option("--inject-fault", o->fault,
                  "Break the run on purpose to see the check fail: leak (one more request, never read, keeps "
                  "its slot) or mismatch (the first reference token replaced by the second likeliest)");
  cmd->add_option("--out", o->out, "Also write the JSON document to this file");
  cmd->callback([o] { report(run(*o)); });
}

}  // namespace kiln::cli
