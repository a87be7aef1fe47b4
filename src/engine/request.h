// What a client asks of the engine (RequestSpec) and what comes back, one event per token
// (TokenEvent), ending with the event that carries the finish reason.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "engine/token_constraint.h"
#include "model/lora_adapter.h"

namespace kiln {

inline constexpr size_t kMaxLogitBias = 300;

enum class FinishReason : uint8_t {
  kNone,       // still running
  kStop,       // an EOS id of the model or one of the request's stop token ids
  kLength,     // max_tokens generated
  kCancelled,  // the client cancelled (or went away)
  kError,      // the engine could not continue the request; TokenEvent::error says why
};
const char* finish_reason_name(FinishReason r);

struct RequestSpec {
  std::vector<int32_t> prompt;          // token ids, at least one
  SamplingParams sampling;
  std::optional<uint64_t> seed;         // unset: the engine picks one
  int64_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;  // besides the model's EOS ids
  bool ignore_eos = false;
  // Thinking budget: once `tokens` tokens have been generated inside the reasoning span (opened
  // by `open_id`, or open from the first token when `starts_open`), the next token is `close_id`
  // instead of a sampled one, and decoding goes on from there. tokens < 0: no budget.
  struct ThinkingBudget {
    int64_t tokens = -1;
    int32_t open_id = -1, close_id = -1;
    bool starts_open = false;
  } thinking;
  // >= 0: score every prompt token after the first (its logprob given what precedes it, and this
  // many alternatives); the scores come with the first TokenEvent. Such a prompt is computed in
  // full (no prefix-cache hit).
  int32_t prompt_logprobs = -1;
  // LoRA adapters, by their AdapterRegistry names: `adapter` is one use of weight 1, `adapters` a
  // weighted stack (the API's `adapters: [{name, scale}]`, docs/api.md "Inference"); both may be
  // given, `adapter` then comes first. Both empty: the registry's default adapter where one is set
  // (unless `base_model`: the API's explicit `"adapter": null` / `""`), else the base model.
  struct AdapterUse {
    std::string name;
    float weight = 1.f;
  };
  std::string adapter;
  std::vector<AdapterUse> adapters;
  uint64_t adapter_revision = 0;        // > 0: `adapter` must be loaded at this revision
  bool base_model = false;              // with no adapter named: ignore the default adapter
  // An adapter outside the registry, applied alone at weight 1 (a training job's rollouts sample
  // the adapter it is training: train/train_run.h, "Online runs"). `private_key` names exactly
  // these weights in the prefix cache, so it must change whenever they do. Not with `adapter(s)`.
  std::shared_ptr<const LoraAdapter> private_adapter;
  std::string private_key;
  // Structured output: the tokens this request may generate (null: any). Applied from the first
  // generated token, or, when `constraint_after` >= 0, from the token after the first
  // `constraint_after` (the reasoning span's closing token: the reasoning stays free). Where the
  // model may open a reasoning span itself (a template that leaves it to the model, thinking on),
  // `optional_reasoning_open` is that span's opening id: the constraint applies from the first
  // token, which may also be this id; generating it frees the request until `constraint_after`.
  // One constraint per request (the engine advances it); a request with one cannot ignore_eos.
  std::shared_ptr<TokenConstraint> constraint;
  int32_t constraint_after = -1;
  int32_t optional_reasoning_open = -1;
  // Added to the logits of these ids before every sampling transform (OpenAI's logit_bias), at
  // most kMaxLogitBias entries, each id in the vocabulary and each value in [-100, 100].
  std::vector<std::pair<int32_t, float>> logit_bias;
  // Stop strings are matched on detokenised text by the server (it owns the tokenizer); it
  // cancels the request when one matches.
};

struct TokenEvent {
  int32_t token = -1;  // -1 on an event that only finishes the request (cancel, error)
  float logprob = 0.f;
  std::vector<TokenLogprob> top_logprobs;
  std::vector<SampledToken> prompt_scores;  // prompt tokens 1.. (prompt_logprobs), first event only
  FinishReason finish = FinishReason::kNone;
  std::string error;   // with kError
};

}  // namespace kiln
