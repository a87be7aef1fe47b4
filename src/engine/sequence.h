// Sequence: the engine's record of one request in flight: its spec, sampler, output channel,
// model state (block table + GDN slot) and how far its prompt and generation have got.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/block_manager.h"
#include "engine/prefix_cache.h"
#include "engine/request.h"
#include "engine/sampler.h"
#include "engine/token_channel.h"
#include "model/lora_adapter.h"

namespace kiln {

enum class SequencePhase : uint8_t { kWaiting, kPrefill, kDecode, kFinished };

struct Sequence {
  Sequence(uint64_t id_, RequestSpec spec_, PrefixKey key_, uint64_t seed, std::shared_ptr<TokenChannel> ch)
      : id(id_), spec(std::move(spec_)), key(std::move(key_)), sampler(spec.sampling, seed), channel(std::move(ch)),
        tokens(spec.prompt), prompt_len(static_cast<int64_t>(spec.prompt.size())),
        in_reasoning(spec.thinking.starts_open),
        constrained(spec.constraint && (spec.constraint_after < 0 || spec.optional_reasoning_open >= 0)) {}

  uint64_t id;
  RequestSpec spec;
  PrefixKey key;
  // The adapters resolved at submit, held here so that an unload cannot free them in flight,
  // and the stack every forward of this request applies (pointing into `adapters`).
  std::vector<std::shared_ptr<const LoraAdapter>> adapters;
  std::vector<LoraTerm> lora;
  Sampler sampler;
  std::shared_ptr<TokenChannel> channel;
  SequenceState state;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len;
  SequencePhase phase = SequencePhase::kWaiting;
  FinishReason finish = FinishReason::kNone;
  std::string error;
  std::vector<SampledToken> prompt_scores;  // prompt_logprobs, until the first event carries them
  bool in_reasoning;             // inside the reasoning span (for the thinking budget)
  int64_t reasoning_tokens = 0;  // generated inside it
  bool constrained;              // spec.constraint applies to the next token

  // The first generated token may open the reasoning span instead of following the constraint.
  bool may_open_reasoning() const { return constrained && spec.optional_reasoning_open >= 0 && generated().empty(); }

  // Whether the next token is sampled from the row's logits as they are: no constraint in force,
  // no bias (such rows need their logits on the host).
  bool samples_raw_logits() const { return !constrained && spec.logit_bias.empty(); }

  // The thinking budget is spent: the next token must close the reasoning span.
  bool must_close_reasoning() const {
    return spec.thinking.tokens >= 0 && in_reasoning && reasoning_tokens >= spec.thinking.tokens;
  }
  // An opening id inside the span is one of its tokens (counted, so that a model repeating it
  // cannot outrun the budget).
  void note_reasoning(int32_t token) {
    if (token == spec.thinking.open_id && !in_reasoning) in_reasoning = true;
    else if (token == spec.thinking.close_id) in_reasoning = false;
    else if (in_reasoning) ++reasoning_tokens;
  }

  int64_t prompt_remaining() const { return prompt_len - state.length; }
  std::span<const int32_t> generated() const { return std::span<const int32_t>(tokens).subspan(static_cast<size_t>(prompt_len)); }
  // Every K/V block the request can ever need (its prompt and max_tokens), reserved against at
  // admission so that a running request never waits for blocks (no deadlock, no preemption).
  int64_t max_blocks() const { return BlockManager::blocks_for(prompt_len + spec.max_tokens); }
};

}  // namespace kiln
