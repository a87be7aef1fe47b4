// GET /v1/models, /health, /metrics, /v1/config.
#include "server/route_support.h"
#include "server/routes.h"

namespace kiln {

void add_info_routes(httplib::Server& server, ServerContext& ctx) {
  auto model_json = [&ctx] {
    const int64_t created =
        std::chrono::duration_cast<std::chrono::seconds>(ctx.started.time_since_epoch()).count();
    return Json{{"id", ctx.model_id}, {"object", "model"}, {"created", created}, {"owned_by", "kiln"},
                {"max_model_len", ctx.max_context},
                {"tokenizer_sha256", ctx.tokenizer_sha256.empty() ? Json(nullptr) : Json(ctx.tokenizer_sha256)}};
  };
  server.Get("/v1/models", [model_json](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"object", "list"}, {"data", Json::array({model_json()})}});
  });
  server.Get(R"(/v1/models/(.+))", [&ctx, model_json](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    if (id == ctx.model_id) return send_json(res, 200, model_json());
    ApiError e = ApiError::invalid("model", "model '" + id + "' is not served here; this server serves '" + ctx.model_id + "'");
    e.http_status = 404;
    e.code = "model_not_found";
    send_error(res, e);
  });
  server.Get("/health", [&ctx](const httplib::Request&, httplib::Response& res) {
    const EngineStats e = ctx.actor->stats();
    const std::string last_error = ctx.actor->last_error();
    std::string status = "ready";
    if (ctx.config.server.profile == "maintenance") status = "maintenance";
    else if (!last_error.empty()) status = "degraded";
    if (ctx.stopping.load()) status = "stopping";
    const double uptime =
        std::chrono::duration<double>(std::chrono::system_clock::now() - ctx.started).count();
    Json body = {{"status", status},
                 {"model", ctx.model_id},
                 {"backend", ctx.backend},
                 {"profile", ctx.config.server.profile},
                 {"uptime_seconds", uptime},
                 {"engine",
                  {{"running", e.running},
                   {"waiting", e.waiting},
                   {"kv_blocks_free", e.free_blocks},
                   {"kv_blocks_total", e.total_blocks},
                   {"kv_blocks_cached", e.cached_blocks},
                   {"kv_dtype", ctx.kv_dtype},
                   {"gdn_slots_free", e.free_slots},
                   {"gdn_slots_total", e.total_slots},
                   {"gdn_slots_cached", e.cached_snapshots}}},
                 {"last_error", last_error.empty() ? Json(nullptr) : Json(last_error)}};
    if (ctx.backend_impl) {  // what the dashboard's memory card shows; null where unknown
      const MemoryUsage m = ctx.backend_impl->memory_usage();
      auto bytes = [](int64_t v) { return v < 0 ? Json(nullptr) : Json(v); };
      body["memory"] = {{"device_used_bytes", bytes(m.used_bytes)},
                        {"device_total_bytes", bytes(m.total_bytes)},
                        {"what", m.what}};
    }
    const std::string def = ctx.adapters ? ctx.adapters->default_name() : "";
    body["default_adapter"] = def.empty() ? Json(nullptr) : Json(def);
    if (ctx.training) {
      int64_t queued = 0;
      Json running = nullptr;
      for (const JobInfo& j : ctx.training->list()) {
        if (j.state == JobState::kQueued) ++queued;
        if (j.state == JobState::kRunning) running = j.id;
      }
      body["training"] = {{"running", running}, {"queued", queued}};
    }
    send_json(res, status == "ready" || status == "degraded" ? 200 : 503, body);
  });
  server.Get("/metrics", [&ctx](const httplib::Request&, httplib::Response& res) {
    res.set_content(ctx.metrics.render(ctx.actor->stats()), "text/plain; version=0.0.4");
  });
  server.Get("/v1/config", [&ctx](const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, ctx.config_report);
  });
}

}  // namespace kiln
