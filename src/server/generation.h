// Generation: one API request in flight: its n choices submitted to the engine, and the path
// from their token events to OpenAI output: incremental detokenisation, ChoiceOutput (stop
// strings, reasoning, tool calls), logprobs, finish reasons, usage, latency metrics. Streaming
// routes read deltas as they come; non-streaming ones read the accumulated choices at the end.
// Whatever happens (client gone, stop string, timeout, error), destroying a Generation cancels
// the choices still running; the engine returns their blocks and slots.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/api_error.h"
#include "server/choice_output.h"
#include "server/openai_request.h"
#include "server/server_context.h"
#include "server/structured_output.h"
#include "tokenizer/incremental_detokenizer.h"

namespace kiln {

struct TokenRecord {  // one generated token, for logprobs
  int32_t id = 0;
  float logprob = 0.f;
  std::vector<TokenLogprob> top;
};

struct ChoiceState {
  int index = 0;
  std::shared_ptr<TokenChannel> channel;
  IncrementalDetokenizer detok;
  ChoiceOutput output;
  std::vector<TokenRecord> tokens;
  std::vector<SampledToken> prompt_scores;  // prompt tokens 1.. when asked for (prompt_logprobs)
  std::string finish_reason;  // "" while running
  std::string error;          // an engine error ends the choice with it
  std::chrono::steady_clock::time_point last_token;
};

struct GenerationInput {
  std::vector<int32_t> prompt;
  const GenerationRequest* gen = nullptr;
  int64_t max_tokens = 16;
  int first_index = 0;  // index of the first choice (completions: prompt * n)
  ChoiceOutputOptions output;
  RequestSpec::ThinkingBudget thinking;
  int32_t prompt_logprobs = -1;  // >= 0: score the prompt (with this many alternatives)
  // Structured output: each choice follows this grammar (null: none) from its first token, or
  // from the token after `constraint_after` (the reasoning span's close) when that is >= 0; with
  // `optional_reasoning_open` (the span's opening id) the first token may open the span instead
  // (RequestSpec::optional_reasoning_open).
  std::shared_ptr<const grammar::MaskCache> grammar;
  int32_t constraint_after = -1;
  int32_t optional_reasoning_open = -1;
};

struct ChoiceDelta {
  const ChoiceState* choice;
  OutputDelta delta;
  std::vector<TokenRecord> tokens;  // the tokens this delta came from (for logprobs)
  bool finished = false;            // choice->finish_reason is set
};

class Generation {
 public:
  // Submits the n choices (seed + i when a seed is given). A refusal cancels what was already
  // submitted and comes back as the ApiError the client gets.
  static std::optional<ApiError> start(ServerContext& ctx, const GenerationInput& in, std::unique_ptr<Generation>& out);
  ~Generation();

  // Waits up to `wait` for events and delivers them; returns false once every choice has
  // finished. `on_delta` returning false (client gone) cancels every choice.
  bool pump(std::chrono::milliseconds wait, const std::function<bool(const ChoiceDelta&)>& on_delta);
  // Cancels every running choice (timeout, client gone).
  void cancel();
  const std::vector<std::unique_ptr<ChoiceState>>& choices() const { return choices_; }
  int64_t prompt_tokens() const { return prompt_tokens_; }
  int64_t completion_tokens() const;
  // The adapter stack every choice resolved at submit (one for all choices; empty: the base model).
  const std::vector<ResolvedAdapter>& adapters() const { return adapters_; }

 private:
  Generation(ServerContext& ctx) : ctx_(ctx) {}
  static std::optional<ApiError> start_once(ServerContext& ctx, const GenerationInput& in, std::unique_ptr<Generation>& out);
  void handle(ChoiceState& c, const TokenEvent& e, std::vector<ChoiceDelta>& out);

  ServerContext& ctx_;
  std::vector<std::unique_ptr<ChoiceState>> choices_;
  int64_t prompt_tokens_ = 0;
  std::vector<std::vector<ResolvedAdapter>> resolved_;  // per choice, as submitted
  std::vector<ResolvedAdapter> adapters_;
  std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  bool first_token_seen_ = false;
  bool cancelled_ = false;
};

// The finish reason OpenAI clients expect for an engine finish ("stop", "length", ...).
std::string finish_reason_text(FinishReason r, bool stopped_by_string, bool has_tool_calls);

}  // namespace kiln
