// The server's side of an online training job (docs/training.md, "Online runs"): each step's
// rollout. The completions are sampled by the serving engine's batched decode from the adapter
// being trained, passed to it as a private adapter (RequestSpec::private_adapter, keyed per job
// and step so no cached prefix outlives the weights it was computed with), with the job's sampler
// settings and seeds; each is scored by the reward (an eval scorer against the prompt's reference,
// or training.reward_url), and for OPD its tokens by the teacher (the served base model, or a
// loaded adapter, behind an optional teacher-only system prompt) through the engine's prompt
// log-probabilities, or by the remote teacher of training.teacher_url (server/remote_teacher.h).
// Serving requests share the engine's cycles meanwhile.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "eval/scorer.h"
#include "grammar/grammar_cache.h"
#include "server/json_post.h"
#include "server/remote_teacher.h"
#include "server/server_context.h"
#include "train/train_run.h"

namespace kiln {

struct RolloutPrompt {
  nlohmann::json messages;                 // as the request gave them (the reward server's `prompt`)
  std::optional<nlohmann::json> reference; // the scorer's expected answer
  std::vector<int32_t> tokens;             // the student's prompt: the messages with the generation prompt
  std::vector<int32_t> teacher_tokens;     // OPD: the teacher's (its system prompt first)
  bool opens_reasoning = false;            // the rendered prompt leaves the reasoning span open
};

struct RolloutSettings {
  std::vector<RolloutPrompt> prompts;
  int64_t group_size = 8;
  float temperature = 1.f, top_p = 1.f;
  int64_t top_k = 0;
  int64_t max_tokens = 16;
  bool ignore_eos = false;            // every completion runs to max_tokens (`kiln bench train`)
  bool enable_thinking = false;       // the chat template's enable_thinking for every prompt
  uint64_t seed = 0;
  std::optional<ScorerSpec> scorer;   // the reward: a scorer against each prompt's reference,
  // or training.reward_url: POST {prompt, reference, completions} -> {scores: [...]}; neither: no
  // reward (OPD only)
  std::optional<JsonEndpoint> reward_server;
  bool opd = false;
  std::string teacher_adapter;        // OPD: "" the base model, else a loaded adapter's name
  std::optional<RemoteTeacher> remote_teacher;  // OPD: training.teacher_url instead of the engine
  std::string key;                    // unique to the job: the private adapter's prefix-cache key
  // `response_format`: every rollout follows this grammar (null: free), after the reasoning span
  // where thinking is on, as a chat completion's output would.
  std::shared_ptr<const grammar::MaskCache> grammar;
  nlohmann::json response_format;
};

// The job's rollout source: `steps` rollouts, each timed by phase (RolloutSource::Batch). Errors
// name what failed (the engine's refusal, the reward server and its answer, the teacher adapter).
RolloutSource make_rollout_source(const ServerContext& ctx, std::shared_ptr<const RolloutSettings> settings, int64_t steps);

// The reward server's scores for one prompt's completions (exposed for tests).
Result<std::vector<double>> reward_server_scores(const JsonEndpoint& server, const nlohmann::json& body,
                                                 size_t completions);

}  // namespace kiln
