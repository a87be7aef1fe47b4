// Intermediate adapters of a training job (the API's config.checkpoint_interval,
// docs/training-api.md "Publication"): every N optimizer steps the adapter as it stands is
// published, atomically and validated like the final one (train/adapter_publish.h), to
// <adapter_dir>/<output_name>.checkpoints/step-<N>/ (PEFT layout + a small train_receipt.json of
// kind "kiln.train_checkpoint"). Only the last TrainJobRequest::checkpoint_keep stay: older ones
// are removed as new ones land, and the job's status lists those that remain. The folder holds one
// job's checkpoints: a job that writes checkpoints first removes what an earlier job of the same
// output_name left there. Checkpoints are never loaded into the registry.
#pragma once

#include <functional>
#include <string>

#include "train/train_job.h"

namespace kiln {

// Where a job's checkpoints go: <adapter_dir>/<output_name>.checkpoints.
std::string checkpoint_dir(const std::string& adapter_dir, const std::string& output_name);

// With req.spec.checkpoint_interval > 0: sets req.spec.checkpoint to publish each checkpoint and
// returns a progress function that forwards to `progress` with TrainProgress::checkpoints filled
// in. Otherwise returns `progress` unchanged.
std::function<void(const TrainProgress&)> with_checkpoints(const TrainJobEnv& env, TrainJobRequest& req,
                                                           std::function<void(const TrainProgress&)> progress);

}  // namespace kiln
