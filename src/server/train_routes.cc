// The training routes (docs/training-api.md, "Routes"): POST /v1/train/sft, /v1/train/grpo and /v1/train/opd
// validate the whole request (server/train_request.h) and queue a job, answering {job_id, state,
// queue_position} at once (503 + Retry-After when training.max_queued_jobs jobs already wait); GET
// /v1/train/status/{job_id}, GET /v1/train/queue, DELETE /v1/train/queue/{job_id} (cancel).
#include "server/route_support.h"
#include "server/routes.h"
#include "server/train_request.h"

namespace kiln {

namespace {

ApiError job_not_found(const std::string& id, const Status& st) {
  ApiError e = ApiError::invalid("job_id", st.message());
  e.http_status = 404;
  e.code = "job_not_found";
  return e;
}

void submit_job(ServerContext& ctx, TrainSpec::Kind kind, const httplib::Request& req, httplib::Response& res) {
  if (!ctx.training) return send_error(res, ApiError::from_status(failed_precondition("training is not available on this server")));
  if (auto e = check_qualified(ctx, RouteFamily::kTraining)) return send_error(res, *e);
  Json body;
  if (auto e = parse_body(req, body)) return send_error(res, *e);
  std::shared_ptr<TrainJobRequest> job;
  if (auto e = parse_train_request(ctx, kind, body, job)) return send_error(res, *e);
  const std::string type = job->type;
  auto info = ctx.training->submit(type, make_train_job(ctx.train_env, job));
  if (!info.ok()) {
    ApiError e = ApiError::from_status(info.status());
    if (info.status().code() == ErrorCode::kResourceExhausted) {
      e.http_status = 503;
      e.code = "training_queue_full";
      e.retry_after_secs = 30;
    }
    return send_error(res, e);
  }
  send_json(res, 200, {{"job_id", info->id}, {"job_type", type}, {"state", job_state_name(info->state)},
                       {"queue_position", info->queue_position}, {"output_name", job->output_name}});
}

}  // namespace

void add_train_routes(httplib::Server& server, ServerContext& ctx) {
  server.Post("/v1/train/sft", [&ctx](const httplib::Request& req, httplib::Response& res) {
    submit_job(ctx, TrainSpec::Kind::kSft, req, res);
  });
  server.Post("/v1/train/grpo", [&ctx](const httplib::Request& req, httplib::Response& res) {
    submit_job(ctx, TrainSpec::Kind::kGrpo, req, res);
  });
  server.Post("/v1/train/opd", [&ctx](const httplib::Request& req, httplib::Response& res) {
    submit_job(ctx, TrainSpec::Kind::kOpd, req, res);
  });
  server.Get(R"(/v1/train/status/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto info = ctx.training ? ctx.training->status(id) : Result<JobInfo>(not_found("no training job '" + id + "'"));
    if (!info.ok()) return send_error(res, job_not_found(id, info.status()));
    send_json(res, 200, Json(info->to_json()));
  });
  server.Get("/v1/train/queue", [&ctx](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    int64_t queued = 0;
    Json running = nullptr;
    if (ctx.training)
      for (const JobInfo& j : ctx.training->list()) {
        data.push_back(Json(j.to_json()));
        if (j.state == JobState::kQueued) ++queued;
        if (j.state == JobState::kRunning) running = j.id;
      }
    send_json(res, 200, {{"object", "list"}, {"data", data}, {"running", running}, {"queued", queued},
                         {"max_queued_jobs", ctx.training ? ctx.training->max_queued() : 0}});
  });
  server.Delete(R"(/v1/train/queue/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string id = req.matches[1];
    auto info = ctx.training ? ctx.training->cancel(id) : Result<JobInfo>(not_found("no training job '" + id + "'"));
    if (!info.ok()) {
      if (info.status().code() == ErrorCode::kNotFound) return send_error(res, job_not_found(id, info.status()));
      return send_error(res, ApiError::from_status(info.status(), "job_id"));
    }
    Json j = Json(info->to_json());
    j["cancel_requested"] = true;
    send_json(res, 200, j);
  });
}

}  // namespace kiln
