// The server's side of evaluation (docs/evals.md): the GenerateFn eval jobs run every example
// through (chat template -> tokens -> Generation, the path of /v1/chat/completions, waiting for
// the whole reply), and the post-training eval a training job calls before auto_load.
#pragma once

#include <atomic>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "eval/eval_jobs.h"
#include "server/server_context.h"

namespace kiln {

GenerateFn make_eval_generate(ServerContext& ctx);

// Loads the adapter at `adapter_path` under a temporary registry name, runs `suite` on it as an
// eval job (seed 0, greedy), waits for it, unloads it, and returns {suite, eval_job_id, accuracy,
// passed, total, wilson}. Errors name the suite or the eval job's failure.
Result<nlohmann::json> run_post_eval(ServerContext& ctx, const std::string& suite, const std::string& adapter_path,
                                     const std::string& output_name, const std::atomic<bool>& cancel);

}  // namespace kiln
