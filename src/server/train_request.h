// The bodies of POST /v1/train/sft and /v1/train/grpo (docs/training-api.md, "Routes" and
// "`config`") parsed and validated into a training job before anything is queued: the `config`
// envelope (LoRA, optimizer, GRPO, training-control and job fields; unknown keys refused), and the
// data (`examples` / `groups` / `dataset_path`) tokenized through train/train_data.h against the
// served model's context and `max_seq_length`. Every error is a 400 (404 for an unknown
// base_adapter) naming the field.
#pragma once

#include <memory>
#include <optional>

#include "server/api_error.h"
#include "server/request_fields.h"
#include "server/server_context.h"
#include "train/train_job.h"

namespace kiln {

// Parses `body` for a job of `kind`; on success `out` holds the job's request. The backend's
// training capabilities bound it: a backend without training refuses every job (501 naming the
// backend), and `lora_rank` must lie in its Muon rank range (Muon's Newton-Schulz runs in the
// rank-sized Gram space; the same range holds for every optimizer).
std::optional<ApiError> parse_train_request(const ServerContext& ctx, TrainSpec::Kind kind, const Json& body,
                                            std::shared_ptr<TrainJobRequest>& out);

}  // namespace kiln
