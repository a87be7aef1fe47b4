// The HTTP routes, registered on a cpp-httplib server: inference (chat, completions, batch) and
// the server's own (models, health, metrics, config, adapters). Each handler answers OpenAI-shaped errors.
#pragma once

#include <httplib.h>

#include "server/server_context.h"

namespace kiln {

void handle_chat(ServerContext& ctx, const httplib::Request& req, httplib::Response& res);
// `batch`: POST /v1/completions/batch (many prompts, one aggregated response, no streaming).
void handle_completions(ServerContext& ctx, const httplib::Request& req, httplib::Response& res, bool batch);
void add_info_routes(httplib::Server& server, ServerContext& ctx);
// GET /v1/adapters, POST /v1/adapters/load, POST /v1/adapters/unload, DELETE /v1/adapters/{name}.
// Also GET /v1/adapters/{name}/download, POST /v1/adapters/upload, POST /v1/adapters/merge.
void add_adapter_routes(httplib::Server& server, ServerContext& ctx);
// POST /v1/train/sft, POST /v1/train/grpo, GET /v1/train/status/{id}, GET /v1/train/queue,
// DELETE /v1/train/queue/{id}.
void add_train_routes(httplib::Server& server, ServerContext& ctx);
// POST /v1/datasets?name=NAME (streamed JSONL into training.data_dir), GET /v1/datasets,
// DELETE /v1/datasets/{name}.
void add_dataset_routes(httplib::Server& server, ServerContext& ctx);
// /v1/eval/...: suites, run, compare, jobs, synthesize (docs/evals.md).
void add_eval_routes(httplib::Server& server, ServerContext& ctx);
// The dashboard: /ui/ and its files (embedded), / -> /ui/, GET /v1/adapters/{name}/receipt.
void add_ui_routes(httplib::Server& server, ServerContext& ctx);

}  // namespace kiln
