// ServerContext: what every route handler shares: the resolved configuration, the engine actor,
// adapter registry, training queue, tokenizer and chat template, the model's facts the API checks
// against, and the metrics.
#pragma once

#include <atomic>

#include <nlohmann/json.hpp>
#include <chrono>
#include <string>
#include <vector>

#include "config/kiln_config.h"
#include "engine/adapter_registry.h"
#include "engine/engine_actor.h"
#include "server/memory_plan.h"
#include "server/metrics.h"
#include "server/route_gates.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "train/job_queue.h"
#include "train/train_job.h"

namespace kiln {

class RequestLog;
class StructuredOutputs;
class SuiteStore;
class EvalJobs;

struct ServerContext {
  KilnConfig config;
  nlohmann::json config_report;  // GET /v1/config: each field's value and source
  EngineActor* actor = nullptr;
  AdapterRegistry* adapters = nullptr;  // the loaded LoRA adapters (null: none can be)
  std::string state_dir;                // server.state_dir: Kiln's writable state (resolved, exists)
  std::string adapter_dir;              // model.adapter_dir, or <state_dir>/adapters
  std::string data_dir;                 // training.data_dir, or <state_dir>/datasets: what dataset_path may name
  JobQueue* training = nullptr;         // the training jobs (null: training routes answer 409)
  TrainJobEnv train_env;                // what every job shares: model, registry, step runner
  const Tokenizer* tokenizer = nullptr;
  std::string tokenizer_sha256;  // its tokenizer.json's content hash (server/remote_teacher.h)
  const ChatTemplate* chat_template = nullptr;  // null: the model has none (chat routes answer 400)
  StructuredOutputs* structured = nullptr;      // grammars of requests (null: constraints answer 400)
  std::string model_id;
  std::string backend;       // the backend's name, for /health and /v1/config
  RouteGates gates;          // what the capability report's evidence qualifies on this backend
  const Backend* backend_impl = nullptr;  // the backend itself (its memory use for /health); may be null
  int64_t vocab_size = 0;    // the model's
  int64_t max_context = 0;   // prompt + generated tokens one request may hold
  std::string kv_dtype;      // the K/V pool's element type (f32, bf16, f8e4m3), for /health
  MemoryPlan memory;         // the device's division: K/V pool and the room a training job is admitted against
  int64_t default_max_tokens = 4096;  // when a request gives none (capped by the context left)
  int32_t think_open_id = -1, think_close_id = -1;  // <think> / </think>, -1 if the tokenizer has none
  std::chrono::system_clock::time_point started = std::chrono::system_clock::now();
  Metrics metrics;
  SuiteStore* eval_suites = nullptr;  // <adapter_dir>/../eval-suites (null: eval routes answer 409)
  EvalJobs* evals = nullptr;          // the eval jobs
  RequestLog* request_log = nullptr;  // logging.request_log: each inference request's row (null: off)
  std::atomic<bool> stopping{false};
};

}  // namespace kiln
