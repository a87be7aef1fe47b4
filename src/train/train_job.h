// A training job's work as the server queues it: run_training with its device work on the engine's
// thread (DeviceRunner), then the trained factors copied to the host there and published with
// their train_receipt.json from the job's thread (train/adapter_publish.h), then with auto_load
// the adapter loaded as the next revision of its name and made the registry's default, so the
// next request naming no adapter uses it.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/adapter_registry.h"
#include "model/qwen35.h"
#include "train/job_queue.h"
#include "train/train_run.h"

namespace kiln {

// What every job of one server shares. Pointers must outlive the JobQueue running the jobs.
struct TrainJobEnv {
  Qwen35Model* model = nullptr;
  AdapterRegistry* registry = nullptr;  // auto_load; may be null (then nothing is loaded)
  std::string adapter_dir;
  DeviceRunner run_on_device;           // the job's device work (empty: on the job's thread)
  nlohmann::json base_model;            // the receipt's base model identity (path, id, config hash)
  // Runs eval suite `suite` on the adapter published at `path` (for `name`) and returns
  // {suite, eval_job_id, accuracy, passed, total, wilson, ...}; empty: post_eval is refused.
  std::function<Result<nlohmann::json>(const std::string& suite, const std::string& path, const std::string& name,
                                       const std::atomic<bool>& cancel)>
      post_eval;
};

struct TrainJobRequest {
  std::string type;  // "sft" | "grpo" | "opd"
  int64_t prompts = 0;  // online jobs: the prompts each step samples from (0: offline data)
  TrainSpec spec;    // spec.base_adapter points into `base_adapter`
  std::shared_ptr<const LoraAdapter> base_adapter;  // held for the job's life
  std::string output_name;
  bool auto_load = true;
  nlohmann::json hyperparameters;  // the request's config as resolved (defaults filled in)
  std::string data_sha256;         // of the canonical training input
  std::string post_eval_suite;     // "": no post-training eval
  std::optional<double> post_eval_min_accuracy;  // below it, publish but do not auto-load
  int64_t checkpoint_keep = 3;     // the last N checkpoints stay on disk; 0: all (training.checkpoint_keep)
};

// The receipt written beside the adapter (docs/training-api.md, "Publication"): hyperparameters,
// data hash, the loss, gradient norm, learning rate and eval loss curves, timings, seed, base
// model identity.
nlohmann::json train_receipt(const TrainJobRequest& req, const TrainResult& result, const nlohmann::json& base_model);

JobWork make_train_job(const TrainJobEnv& env, std::shared_ptr<TrainJobRequest> req);

}  // namespace kiln
