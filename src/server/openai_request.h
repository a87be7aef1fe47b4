// The inference requests of the OpenAI-compatible API (docs/api.md "Inference"; fields in
// docs/serving.md "Routes"), parsed and range-checked: POST /v1/chat/completions, /v1/completions
// and /v1/completions/batch. Parsing knows nothing of the model; limits that depend on it (context
// length, vocabulary, adapters) are checked by the routes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "grammar/grammar_cache.h"
#include "server/request_fields.h"

namespace kiln {

inline constexpr int kMaxChoices = 16;     // n
inline constexpr int kMaxStopStrings = 16;
inline constexpr size_t kMaxStopTokenIds = 64;
inline constexpr size_t kMaxAdapterStack = 8;  // adapters one request stacks
inline constexpr size_t kMaxTools = 128;

struct AdapterRef {
  std::string name;
  double scale = 1.0;
};

// Fields every inference route shares.
struct GenerationRequest {
  std::string model;  // "" when not given
  SamplingParams sampling;
  std::optional<uint64_t> seed;
  std::optional<int64_t> max_tokens;  // unset: what the context leaves, capped by the server
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool logprobs = false;  // report the sampled token's logprob (+ sampling.top_logprobs others)
  int n = 1;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  std::string adapter;         // "" : the default adapter if one is set (see base_model), else the base model
  bool base_model = false;     // `adapter` given as null or "": no default adapter either
  std::vector<AdapterRef> adapters;
  // Structured output: the grammar the output must follow (compiled by the route, which names
  // `grammar_field` in its errors), from response_format, grammar, regex or a forced tool call.
  std::optional<grammar::GrammarSpec> grammar;
  std::string grammar_field;
  // logit_bias: token id -> bias in [-100, 100] (ids are checked against the vocabulary by the route).
  std::vector<std::pair<int32_t, float>> logit_bias;
};

struct ChatRequest {
  GenerationRequest gen;
  Json messages;  // normalised for the chat template: content as a string, tool-call arguments as objects
  Json tools;     // null or an array of {"type": "function", "function": {...}}
  bool tool_choice_none = false;
  // tool_choice "required" (any of the tools) or {"type": "function", "function": {"name"}}: the
  // output is tool calls only, in the template's syntax (the route builds the grammar).
  bool tool_choice_required = false;
  std::string tool_choice_function;  // "" unless a function is named
  bool parallel_tool_calls = true;
  Json template_variables = Json::object();  // chat_template_kwargs (+ enable_thinking)
  std::optional<int64_t> thinking_budget;
};

struct PromptInput {
  bool is_ids = false;
  std::string text;
  std::vector<int32_t> ids;
};

struct CompletionRequest {
  GenerationRequest gen;
  std::vector<PromptInput> prompts;  // one for /v1/completions with a single prompt
  bool echo = false;
  std::optional<int> prompt_logprobs;  // top alternatives per prompt token (0: just the token's)
};

// `response_format` (text, json_object, json_schema) into `g`'s grammar; problems go to `r`,
// naming response_format (online training jobs read it too).
void read_response_format(const Json& rf, FieldReader& r, GenerationRequest& g);

// Each returns the first problem as an ApiError naming the field, or nullopt.
std::optional<ApiError> parse_chat_request(const Json& body, ChatRequest& out);
// `batch`: the body of /v1/completions/batch ("prompts": a list, each a text or a list of ids).
std::optional<ApiError> parse_completion_request(const Json& body, bool batch, CompletionRequest& out);

}  // namespace kiln
