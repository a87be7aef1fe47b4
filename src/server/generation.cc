#include "server/generation.h"

#include <random>

namespace kiln {

std::string finish_reason_text(FinishReason r, bool stopped_by_string, bool has_tool_calls) {
  std::string s;
  if (stopped_by_string) s = "stop";
  else if (r == FinishReason::kStop) s = "stop";
  else if (r == FinishReason::kLength) s = "length";
  else if (r == FinishReason::kCancelled) s = "abort";
  else s = "error";
  if (s == "stop" && has_tool_calls) s = "tool_calls";
  return s;
}

namespace {

bool same_stack(const std::vector<ResolvedAdapter>& a, const std::vector<ResolvedAdapter>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].revision != b[i].revision || a[i].weight != b[i].weight) return false;
  return true;
}

}  // namespace

std::optional<ApiError> Generation::start(ServerContext& ctx, const GenerationInput& in, std::unique_ptr<Generation>& out) {
  // Each choice resolves its adapters when it is submitted. Should an adapter be swapped between
  // two choices' submits (n > 1), they are cancelled and submitted again, so that every choice of
  // one response comes from one revision (the response's `adapters` field says which). A swap is
  // rare and swaps are seconds apart, so a second attempt all but always agrees.
  constexpr int kAttempts = 4;
  for (int attempt = 1;; ++attempt) {
    std::unique_ptr<Generation> g;
    if (auto e = start_once(ctx, in, g)) return e;
    bool agree = true;
    for (size_t i = 1; i < g->resolved_.size(); ++i) agree = agree && same_stack(g->resolved_[0], g->resolved_[i]);
    if (agree || attempt == kAttempts) {
      if (!agree) return ApiError::from_status(resource_exhausted("adapters were swapped while the request's choices were submitted; retry"));
      g->adapters_ = g->resolved_.empty() ? std::vector<ResolvedAdapter>{} : g->resolved_[0];
      out = std::move(g);
      return std::nullopt;
    }
  }
}

std::optional<ApiError> Generation::start_once(ServerContext& ctx, const GenerationInput& in, std::unique_ptr<Generation>& out) {
  std::unique_ptr<Generation> g(new Generation(ctx));
  g->prompt_tokens_ = static_cast<int64_t>(in.prompt.size());
  const GenerationRequest& gen = *in.gen;
  for (int i = 0; i < gen.n; ++i) {
    RequestSpec spec;
    spec.prompt = in.prompt;
    spec.sampling = gen.sampling;
    spec.sampling.logprobs = gen.logprobs;
    if (gen.seed) spec.seed = *gen.seed + static_cast<uint64_t>(i);
    else spec.seed = std::random_device{}() * 0x100000001b3ull + static_cast<uint64_t>(i);
    spec.max_tokens = in.max_tokens;
    spec.stop_token_ids = gen.stop_token_ids;
    spec.ignore_eos = gen.ignore_eos;
    spec.adapter = gen.adapter;
    spec.base_model = gen.base_model;
    for (const AdapterRef& a : gen.adapters) spec.adapters.push_back({a.name, static_cast<float>(a.scale)});
    spec.thinking = in.thinking;
    spec.prompt_logprobs = in.prompt_logprobs;
    if (in.grammar) spec.constraint = StructuredOutputs::constraint(in.grammar);
    spec.constraint_after = in.constraint_after;
    spec.optional_reasoning_open = in.optional_reasoning_open;
    spec.logit_bias = gen.logit_bias;
    auto sub = ctx.actor->submit(std::move(spec));
    if (!sub.ok()) return ApiError::from_status(sub.status());  // the destructor cancels the others
    g->resolved_.push_back(sub->adapters);
    auto c = std::unique_ptr<ChoiceState>(new ChoiceState{in.first_index + i, sub->channel,
                                                          IncrementalDetokenizer(*ctx.tokenizer, SpecialTokenOutput::kSkip),
                                                          ChoiceOutput(in.output), {}, {}, "", "", {}});
    g->choices_.push_back(std::move(c));
  }
  out = std::move(g);
  return std::nullopt;
}

Generation::~Generation() { cancel(); }

void Generation::cancel() {
  for (auto& c : choices_)
    if (!c->channel->finished()) c->channel->cancel();
}

int64_t Generation::completion_tokens() const {
  int64_t n = 0;
  for (const auto& c : choices_) n += static_cast<int64_t>(c->tokens.size());
  return n;
}

void Generation::handle(ChoiceState& c, const TokenEvent& e, std::vector<ChoiceDelta>& out) {
  if (!c.finish_reason.empty()) return;  // stopped by a string: the rest is discarded
  ChoiceDelta d{&c, {}, {}, false};
  if (!e.prompt_scores.empty()) c.prompt_scores = e.prompt_scores;
  if (e.token >= 0) {
    const auto now = std::chrono::steady_clock::now();
    if (!first_token_seen_) {
      first_token_seen_ = true;
      ctx_.metrics.time_to_first_token(std::chrono::duration<double>(now - started_).count());
    } else if (!c.tokens.empty()) {
      ctx_.metrics.inter_token(std::chrono::duration<double>(now - c.last_token).count());
    }
    c.last_token = now;
    c.tokens.push_back({e.token, e.logprob, e.top_logprobs});
    d.tokens.push_back(c.tokens.back());
    // Checkpoints pad their vocabulary beyond the tokenizer's (Qwen: 151936 vs 151669); a padding
    // id has no text.
    if (static_cast<size_t>(e.token) < ctx_.tokenizer->vocab_size()) {
      auto text = c.detok.push(e.token);
      if (text.ok() && !text->empty()) d.delta = c.output.feed(*text);
      if (!text.ok()) c.error = text.status().message();
    }
  }
  const bool stopped = c.output.stopped();
  if (stopped) c.channel->cancel();
  if (stopped || e.finish != FinishReason::kNone || !c.error.empty()) {
    if (!stopped) {
      std::string rest = c.detok.finish();
      OutputDelta tail = c.output.feed(rest);
      OutputDelta fin = c.output.finish();
      d.delta.reasoning += tail.reasoning + fin.reasoning;
      d.delta.content += tail.content + fin.content;
      for (auto* v : {&tail.tool_calls, &fin.tool_calls})
        d.delta.tool_calls.insert(d.delta.tool_calls.end(), v->begin(), v->end());
    }
    if (e.finish == FinishReason::kError && c.error.empty()) c.error = e.error.empty() ? "engine error" : e.error;
    c.finish_reason = c.error.empty() ? finish_reason_text(e.finish, stopped, !c.output.tool_calls().empty()) : "error";
    d.finished = true;
    ctx_.metrics.tokens(0, static_cast<int64_t>(c.tokens.size()));
  }
  if (!d.delta.empty() || d.finished || !d.tokens.empty()) out.push_back(std::move(d));
}

bool Generation::pump(std::chrono::milliseconds wait, const std::function<bool(const ChoiceDelta&)>& on_delta) {
  std::vector<ChoiceDelta> deltas;
  bool running = false;
  for (auto& c : choices_) {
    if (!c->finish_reason.empty()) continue;
    running = true;
    while (auto e = c->channel->try_pop()) handle(*c, *e, deltas);
  }
  if (!running) return false;
  if (deltas.empty()) {
    // Block on the first running choice; with n > 1 the wait is short so the others are polled.
    for (auto& c : choices_) {
      if (!c->finish_reason.empty()) continue;
      auto w = choices_.size() == 1 ? wait : std::min(wait, std::chrono::milliseconds(2));
      if (auto e = c->channel->pop(w)) handle(*c, *e, deltas);
      break;
    }
  }
  for (const auto& d : deltas)
    if (!on_delta(d)) {
      cancel();
      cancelled_ = true;
      return false;
    }
  for (auto& c : choices_)
    if (c->finish_reason.empty()) return true;
  return false;
}

}  // namespace kiln
