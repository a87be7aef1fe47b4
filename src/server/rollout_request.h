// The online form of POST /v1/train/grpo and POST /v1/train/opd (docs/training-api.md, "Online
// jobs"): `prompts` (chat messages, each with an optional `reference`), the `reward` (an eval scorer
// or the configured reward server), the OPD `teacher`, and the sampler's settings in `config`,
// parsed into the job's RolloutSettings. Every refusal is a 400 naming the field (404 for an
// unknown teacher adapter).
#pragma once

#include <optional>
#include <set>
#include <string>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/rollout_service.h"
#include "server/server_context.h"

namespace kiln {

// The limits of the online form (each refusal names its field).
inline constexpr int64_t kMaxRolloutPrompts = 256;
inline constexpr int64_t kMaxGroupSize = 64;
inline constexpr int64_t kMaxRolloutTokens = 1024;          // config.max_tokens
inline constexpr int64_t kMaxRolloutCompletions = 2048;     // prompts x group_size, one step's
inline constexpr int64_t kMaxRolloutSteps = 1000;           // config.steps

// The `config` keys of the online form, and the ones it does not take (epochs, the held-out split,
// packing, exclude_suite, max_seq_length: an online step trains on its own rollout, whose length
// config.max_tokens bounds).
const std::set<std::string>& rollout_config_keys();
const std::set<std::string>& offline_only_config_keys();

// Reads the sampler's settings and the steps from `config` (already checked for unknown keys).
void read_rollout_config(FieldReader& config, bool opd, RolloutSettings& settings, int64_t& steps,
                         float& reward_coeff);

// Reads `prompts`, `reward`, (OPD) `teacher` and `response_format` from the body into `settings`,
// rendering and tokenizing each prompt (and its teacher prompt) against the served context and
// compiling the output's grammar.
std::optional<ApiError> read_rollout_data(const ServerContext& ctx, FieldReader& body, bool opd,
                                          RolloutSettings& settings);

}  // namespace kiln
