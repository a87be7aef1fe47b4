#include "engine/engine.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "engine/row_sampling.h"

namespace kiln {

Result<std::unique_ptr<Engine>> Engine::create(Qwen35Model& model, EngineConfig config) {
  if (config.scheduler.max_batch_tokens <= 0) return invalid_argument("max_batch_tokens must be positive");
  if (config.scheduler.max_running <= 0) return invalid_argument("max_running must be positive");
  if (config.scheduler.max_queue < 0) return invalid_argument("max_queue must be >= 0");
  if (config.snapshot_slots < 0) return invalid_argument("snapshot_slots must be >= 0");
  if (config.channel_capacity == 0) return invalid_argument("channel_capacity must be positive");
  // Replay keeps one slot and one block for its padding rows, on top of what the config asks.
  const bool replay = config.decode_replay && model.backend().replay().available();
  KILN_ASSIGN_OR_RETURN(ModelState state, model.create_state({config.scheduler.max_running + config.snapshot_slots + replay,
                                                               config.kv_blocks + replay}));
  auto engine = std::make_unique<Engine>(model, std::move(config), std::move(state));
  if (replay) {
    const EngineConfig& c = engine->config_;
    KILN_ASSIGN_OR_RETURN(engine->replay_, DecodeReplay::create(model, engine->state_, model.backend().replay(),
                                                                c.scheduler.max_running, c.kv_blocks));
  }
  return engine;
}

Engine::Engine(Qwen35Model& model, EngineConfig config, ModelState state)
    : model_(model),
      config_(std::move(config)),
      state_(std::move(state)),
      blocks_(state_),
      slots_(state_),
      cache_(config_.prefix_cache, blocks_, slots_, state_.block_bytes()),
      scheduler_(config_.scheduler, blocks_, slots_, cache_) {}

Engine::~Engine() {
  for (auto& s : scheduler_.retire_all())
    if (!s->channel->finished()) s->channel->push({-1, 0.f, {}, {}, FinishReason::kCancelled, "engine stopped"});
}

Result<Submission> Engine::submit(RequestSpec spec) {
  const int64_t V = model_.config().vocab_size;
  if (spec.prompt.empty()) return invalid_argument("prompt: no tokens");
  for (int32_t t : spec.prompt)
    if (t < 0 || t >= V)
      return invalid_argument("prompt: token " + std::to_string(t) + " is outside the vocabulary (" + std::to_string(V) + ")");
  for (int32_t t : spec.stop_token_ids)
    if (t < 0 || t >= V) return invalid_argument("stop_token_ids: " + std::to_string(t) + " is outside the vocabulary");
  if (spec.thinking.tokens >= 0 && (spec.thinking.close_id < 0 || spec.thinking.close_id >= V))
    return invalid_argument("thinking_budget_tokens: the model has no token that closes the reasoning span");
  if (spec.prompt_logprobs > 20) return invalid_argument("prompt_logprobs must be in [0, 20]");
  if (spec.max_tokens < 1) return invalid_argument("max_tokens must be >= 1, got " + std::to_string(spec.max_tokens));
  if (spec.constraint && spec.ignore_eos)
    return invalid_argument("ignore_eos: a structured output ends with an end-of-text token; it cannot be ignored");
  if (spec.logit_bias.size() > kMaxLogitBias)
    return invalid_argument("logit_bias: at most " + std::to_string(kMaxLogitBias) + " entries");
  for (const auto& [id, bias] : spec.logit_bias) {
    if (id < 0 || id >= V)
      return invalid_argument("logit_bias." + std::to_string(id) + ": outside the vocabulary (" + std::to_string(V) + ")");
    if (!(bias >= -100.f && bias <= 100.f))
      return invalid_argument("logit_bias." + std::to_string(id) + ": the bias must be in [-100, 100]");
  }
  KILN_RETURN_IF_ERROR(validate(spec.sampling));
  // The stack as the forward applies it, and the prefix-cache identity of exactly that stack:
  // "name@revision*weight" per adapter, so that no cached prefix crosses stacks or revisions.
  std::vector<RequestSpec::AdapterUse> uses;
  if (!spec.adapter.empty()) uses.push_back({spec.adapter, 1.f});
  uses.insert(uses.end(), spec.adapters.begin(), spec.adapters.end());
  // A request naming no adapter gets the default one, resolved here like a named one, so it keeps
  // the revision it started with when a newer one becomes the default.
  std::optional<LoadedAdapter> by_default;
  if (uses.empty() && !spec.base_model && !spec.private_adapter && config_.adapters)
    if ((by_default = config_.adapters->resolve_default())) uses.push_back({by_default->name, 1.f});
  std::vector<std::shared_ptr<const LoraAdapter>> held;
  std::vector<LoraTerm> lora;
  std::string stack_key;
  std::vector<ResolvedAdapter> resolved;
  if (spec.private_adapter) {
    if (!uses.empty() || spec.private_key.empty())
      return invalid_argument("a private adapter is applied alone and needs a key");
    stack_key = spec.private_key + "*1;";
    lora.push_back({spec.private_adapter.get(), 1.f});
    resolved.push_back({spec.private_key, 0, 1.f});
    held.push_back(spec.private_adapter);
  }
  for (size_t i = 0; i < uses.size(); ++i) {
    const auto& u = uses[i];
    if (!std::isfinite(u.weight))
      return invalid_argument("adapters: the weight of '" + u.name + "' is not finite");
    if (!config_.adapters)
      return not_found("adapter '" + u.name + "' is not loaded (the engine serves the base model only)");
    KILN_ASSIGN_OR_RETURN(LoadedAdapter e, by_default ? Result<LoadedAdapter>(*by_default) : config_.adapters->resolve(u.name));
    if (i == 0 && !spec.adapter.empty() && spec.adapter_revision > 0 && e.revision != spec.adapter_revision)
      return not_found("adapter '" + u.name + "' revision " + std::to_string(spec.adapter_revision) +
                       " is not loaded (loaded: revision " + std::to_string(e.revision) + ")");
    char weight[32];
    auto [end, ec] = std::to_chars(weight, weight + sizeof weight, u.weight);  // shortest exact form
    stack_key += e.name + "@" + std::to_string(e.revision) + "*" + std::string(weight, end) + ";";
    lora.push_back({e.adapter.get(), u.weight});
    resolved.push_back({e.name, e.revision, u.weight});
    held.push_back(std::move(e.adapter));
  }
  const int64_t need = BlockManager::blocks_for(static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens);
  if (need > blocks_.capacity())
    return invalid_argument("prompt (" + std::to_string(spec.prompt.size()) + " tokens) + max_tokens (" +
                            std::to_string(spec.max_tokens) + ") needs " + std::to_string(need) +
                            " K/V blocks; the cache has " + std::to_string(blocks_.capacity()));
  const uint64_t id = next_id_.fetch_add(1);
  // Unseeded requests still get a fixed seed per id, so a run of the engine is reproducible.
  const uint64_t seed = spec.seed.value_or(0x9e3779b97f4a7c15ull * id);
  PrefixKey key{config_.model_identity, std::move(stack_key)};
  auto channel = std::make_shared<TokenChannel>(config_.channel_capacity);
  auto seq = std::make_unique<Sequence>(id, std::move(spec), std::move(key), seed, channel);
  seq->adapters = std::move(held);
  seq->lora = std::move(lora);
  KILN_RETURN_IF_ERROR(scheduler_.enqueue(std::move(seq)));
  return Submission{id, channel, std::move(resolved)};
}

void Engine::emit(Sequence& seq, const SampledToken& t) {
  if (seq.may_open_reasoning() && t.token == seq.spec.optional_reasoning_open) {
    seq.constrained = false;  // until the span closes
  } else if (seq.constrained) {
    if (Status st = seq.spec.constraint->accept(t.token); !st.ok()) return fail(seq, st);
  } else if (seq.spec.constraint && t.token == seq.spec.constraint_after) {
    seq.constrained = true;
  }
  seq.tokens.push_back(t.token);
  seq.note_reasoning(t.token);
  const auto& eos = model_.config().eos_token_ids;
  const auto& stops = seq.spec.stop_token_ids;
  TokenEvent e{t.token, t.logprob, t.top, std::move(seq.prompt_scores), FinishReason::kNone, {}};
  if ((!seq.spec.ignore_eos && std::find(eos.begin(), eos.end(), t.token) != eos.end()) ||
      std::find(stops.begin(), stops.end(), t.token) != stops.end())
    e.finish = FinishReason::kStop;
  else if (static_cast<int64_t>(seq.generated().size()) >= seq.spec.max_tokens)
    e.finish = FinishReason::kLength;
  if (e.finish != FinishReason::kNone) {
    seq.finish = e.finish;
    seq.phase = SequencePhase::kFinished;
  }
  seq.channel->push(std::move(e));
}

void Engine::fail(Sequence& seq, const Status& st) {
  seq.finish = FinishReason::kError;
  seq.error = st.to_string();
  seq.phase = SequencePhase::kFinished;
}

Status Engine::run_decode(const Cycle& c) {
  if (c.decode.empty()) return {};
  // The rows grouped by adapter stack (base-model rows first), otherwise in the scheduler's order:
  // a batch keeps its adapter composition whatever the scheduler's rotation, so its decode replay
  // is found again, and the rows of one stack form one LoRA run.
  std::vector<Sequence*> order(c.decode.begin(), c.decode.end());
  std::stable_sort(order.begin(), order.end(), [](const Sequence* a, const Sequence* b) { return a->lora < b->lora; });
  std::vector<SequenceInput> rows;
  for (Sequence* s : order) rows.push_back({&s->state, std::span<const int32_t>(&s->tokens.back(), 1), s->lora});
  auto logits = replay_ && replay_->applies(rows) ? replay_->forward(rows)
                                                  : model_.forward_on_device(rows, LogitsMode::kLast, state_);
  std::vector<RowToSample> picks;
  for (size_t i = 0; i < order.size(); ++i) picks.push_back({order[i], static_cast<int64_t>(i)});
  Result<std::vector<SampledToken>> tokens =
      logits.ok() ? sample_rows(model_.backend(), *logits, picks, config_.device_sampling) : logits.status();
  if (!tokens.ok()) {
    for (Sequence* s : order) fail(*s, tokens.status());
    return tokens.status();
  }
  for (size_t i = 0; i < order.size(); ++i) emit(*order[i], (*tokens)[i]);
  return {};
}

Status Engine::run_prefill(const Cycle& c) {
  if (c.prefill.empty()) return {};
  // Prompt scores: where every scoring row asks only for its own tokens' logprobs
  // (prompt_logprobs 0) and the backend computes them natively, the forward scores them on the
  // device and keeps only each row's last logits; a row that wants alternatives makes the whole
  // cycle copy every position's logits to the host, where each scoring row is scored.
  int64_t scored = 0;
  bool alternatives = false;
  for (const PrefillChunk& p : c.prefill)
    if (p.seq->spec.prompt_logprobs >= 0) {
      scored += p.len;
      alternatives = alternatives || p.seq->spec.prompt_logprobs > 0;
    }
  const bool on_device = scored > 0 && !alternatives && model_.token_scoring(scored).runs_natively();
  const bool all = scored > 0 && !on_device;
  // Per scoring row: position p's target is prompt token p + 1 (none for the prompt's last).
  std::vector<std::vector<int32_t>> targets(c.prefill.size());
  std::vector<std::vector<float>> scores(c.prefill.size());
  std::vector<SequenceInput> rows;
  for (size_t i = 0; i < c.prefill.size(); ++i) {
    const Sequence& s = *c.prefill[i].seq;
    const auto from = static_cast<size_t>(s.state.length), len = static_cast<size_t>(c.prefill[i].len);
    SequenceInput& row = rows.emplace_back(
        SequenceInput{&c.prefill[i].seq->state, std::span<const int32_t>(s.tokens).subspan(from, len), s.lora});
    if (!on_device || s.spec.prompt_logprobs < 0) continue;
    for (size_t p = from; p < from + len; ++p)
      targets[i].push_back(static_cast<int64_t>(p) + 1 < s.prompt_len ? s.tokens[p + 1] : -1);
    scores[i].resize(len);
    row.score_targets = targets[i];
    row.scores = scores[i];
  }
  // Prompt scores on the host need every row there; otherwise the logits stay where they are and
  // sample_rows moves only what each request needs.
  auto logits = all ? model_.forward(rows, LogitsMode::kAll, state_)
                    : model_.forward_on_device(rows, LogitsMode::kLast, state_);
  if (!logits.ok()) {
    for (const PrefillChunk& p : c.prefill) fail(*p.seq, logits.status());
    return logits.status();
  }
  const int64_t V = logits->dim(1);
  std::vector<RowToSample> picks;  // the rows whose prompt ends in this cycle
  int64_t first_row = 0;  // kAll: the logits row of this chunk's first token
  for (size_t i = 0; i < c.prefill.size(); ++i) {
    Sequence& s = *c.prefill[i].seq;
    const int64_t done = s.state.length;
    const int64_t len = c.prefill[i].len;
    auto logits_row = [&](int64_t r) {
      return std::span<const float>(logits->data<float>() + r * V, static_cast<size_t>(V));
    };
    const int64_t last_row = all ? first_row + len - 1 : static_cast<int64_t>(i);
    if (s.spec.prompt_logprobs >= 0) {
      // Position p's logits score prompt token p + 1.
      for (int64_t j = 0; j < len; ++j) {
        const int64_t p = done - len + j;
        if (p + 1 >= s.prompt_len) continue;
        const int32_t token = s.tokens[static_cast<size_t>(p + 1)];
        s.prompt_scores.push_back(all ? score_token(logits_row(first_row + j), token, s.spec.prompt_logprobs)
                                      : SampledToken{token, scores[i][static_cast<size_t>(j)], {}});
      }
    }
    first_row += len;
    // A chunk that ends on a block boundary leaves the state a later prompt can resume from.
    if (done % ModelState::kBlockSize == 0 && done <= s.prompt_len) {
      Status st = cache_.insert(s.key, std::span<const int32_t>(s.tokens).first(static_cast<size_t>(done)),
                                s.state.blocks, s.state.slot);
      if (!st.ok()) {
        fail(s, st);
        continue;
      }
    }
    if (s.prompt_remaining() > 0) continue;
    picks.push_back({&s, last_row});
  }
  Result<std::vector<SampledToken>> tokens = sample_rows(model_.backend(), *logits, picks, config_.device_sampling);
  if (!tokens.ok()) {
    for (const RowToSample& p : picks) fail(*p.seq, tokens.status());
    return tokens.status();
  }
  for (size_t i = 0; i < picks.size(); ++i) {
    picks[i].seq->phase = SequencePhase::kDecode;
    emit(*picks[i].seq, (*tokens)[i]);
  }
  return {};
}

int64_t Engine::retire_finished() {
  std::vector<Sequence*> done;
  for (const auto& s : scheduler_.running())
    if (s->phase == SequencePhase::kFinished) done.push_back(s.get());
  for (Sequence* s : done) {
    std::unique_ptr<Sequence> seq = scheduler_.retire(s);
    if (!seq->channel->finished()) seq->channel->push({-1, 0.f, {}, {}, seq->finish, seq->error});
  }
  return static_cast<int64_t>(done.size());
}

Result<CycleReport> Engine::step() {
  CycleReport report;
  for (auto& s : scheduler_.take_cancelled_waiting()) s->channel->push({-1, 0.f, {}, {}, FinishReason::kCancelled, {}});
  for (const auto& s : scheduler_.running())
    if (s->phase != SequencePhase::kFinished && s->channel->cancelled()) {
      s->finish = FinishReason::kCancelled;
      s->phase = SequencePhase::kFinished;
    }
  // Nothing is in flight between cycles (each one ends with a synchronisation), so the cancelled
  // requests' blocks can go back before this cycle is planned.
  report.finished += retire_finished();

  const Cycle cycle = scheduler_.schedule();
  report.decode_rows = static_cast<int64_t>(cycle.decode.size());
  report.prefill_rows = static_cast<int64_t>(cycle.prefill.size());
  report.tokens = cycle.tokens();
  if (!cycle.decode.empty()) ++decode_cycles_;
  decode_rows_ += report.decode_rows;
  prefill_tokens_ += report.tokens - report.decode_rows;
  Status decode = run_decode(cycle);
  Status prefill = run_prefill(cycle);
  // The cycle's device work must have settled before its requests' blocks and slots are reused.
  Status sync = model_.backend().storage().synchronize();
  report.finished += retire_finished();
  if (!decode.ok()) return decode;
  if (!prefill.ok()) return prefill;
  if (!sync.ok()) return sync;
  return report;
}

EngineStats Engine::stats() const {
  EngineStats s;
  s.free_blocks = blocks_.free_blocks();
  // The padding rows' block and slot (DecodeReplay) are the engine's own, not the requests'.
  const int64_t own = replay_ ? 1 : 0;
  s.total_blocks = blocks_.capacity() - own;
  s.free_slots = slots_.free_slots();
  s.total_slots = slots_.capacity() - own;
  s.running = static_cast<int64_t>(scheduler_.running().size());
  s.waiting = static_cast<int64_t>(scheduler_.waiting());
  s.cached_blocks = cache_.held_blocks();
  s.cached_snapshots = cache_.held_snapshots();
  s.prefix_hits = cache_.hits();
  s.prefix_misses = cache_.misses();
  s.decode_cycles = decode_cycles_;
  s.decode_rows = decode_rows_;
  s.prefill_tokens = prefill_tokens_;
  s.max_running = config_.scheduler.max_running;
  s.slot_bytes = slots_.slot_bytes();
  s.slot_counters = slots_.counters();
  if (replay_) {
    s.decode_replays = replay_->stats().replays;
    s.decode_recordings = replay_->stats().recordings;
    s.decode_adapter_recordings = replay_->stats().adapter_recordings;
    s.decode_recordings_invalidated = replay_->stats().invalidated;
    s.decode_record_failures = replay_->stats().record_failures;
  }
  return s;
}

}  // namespace kiln
