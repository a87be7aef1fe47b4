// The evaluation routes (docs/evals.md "Routes"): suites (register, list, show, delete), eval
// jobs (run, compare, list, show, cancel) and dataset-to-suite synthesis. Bodies are validated
// whole before anything is stored or queued; a 400 names the field, an unknown suite, adapter or
// job is a 404.
#include <fstream>
#include <sstream>

#include "eval/eval_jobs.h"
#include "eval/synthesize.h"
#include "server/route_support.h"
#include "server/routes.h"
#include "core/json_text.h"

namespace kiln {

namespace {

ApiError from_field(const FieldError& e) { return ApiError::invalid(e.field, e.field.empty() ? e.message : e.field + ": " + e.message); }

ApiError not_found_error(const std::string& param, const std::string& code, const std::string& message) {
  ApiError e = ApiError::invalid(param, message);
  e.http_status = 404;
  e.code = code;
  return e;
}

std::optional<ApiError> unavailable(const ServerContext& ctx) {
  if (!ctx.eval_suites || !ctx.evals) return ApiError::from_status(failed_precondition("evaluation is not available on this server"));
  return std::nullopt;
}

// An adapter field: absent, null or "" is the base model; a name must be loaded.
std::optional<ApiError> read_adapter(const ServerContext& ctx, const Json& body, const std::string& field, std::string& out) {
  auto it = body.find(field);
  if (it == body.end() || it->is_null()) return std::nullopt;
  if (!it->is_string()) return ApiError::invalid(field, field + " must be a string (an adapter name) or null");
  out = it->get<std::string>();
  if (out.empty()) return std::nullopt;
  if (!ctx.adapters || !ctx.adapters->resolve(out).ok())
    return not_found_error(field, "adapter_not_found", "adapter '" + out + "' is not loaded");
  return std::nullopt;
}

std::optional<ApiError> check_suite(const ServerContext& ctx, const std::string& name) {
  if (!ctx.eval_suites->load(name).ok()) return not_found_error("suite", "suite_not_found", "no eval suite '" + name + "'");
  return std::nullopt;
}

void submit(ServerContext& ctx, bool compare, const httplib::Request& req, httplib::Response& res) {
  if (auto e = unavailable(ctx)) return send_error(res, *e);
  Json body;
  if (auto e = parse_body(req, body)) return send_error(res, *e);
  std::set<std::string> keys = {"suite", "seed", "max_tokens", "temperature"};
  for (const char* k : compare ? std::vector<const char*>{"adapter_a", "adapter_b"} : std::vector<const char*>{"adapter"})
    keys.insert(k);
  FieldReader r(body, "", keys);
  EvalRunSpec spec;
  spec.kind = compare ? "compare" : "run";
  auto suite = r.string("suite");
  if (auto v = r.integer("seed", 0, INT64_MAX)) spec.seed = static_cast<uint64_t>(*v);
  if (auto v = r.integer("max_tokens", 1, 32768)) spec.max_tokens = *v;
  if (auto v = r.number("temperature", 0, 2)) spec.temperature = *v;
  if (!r.ok()) return send_error(res, *r.error());
  if (!suite || suite->empty()) return send_error(res, ApiError::invalid("suite", "suite is required (a suite name)"));
  spec.suite = *suite;
  if (auto e = check_suite(ctx, spec.suite)) return send_error(res, *e);
  if (compare) {
    if (!body.contains("adapter_a")) return send_error(res, ApiError::invalid("adapter_a", "adapter_a is required (a name, or null for the base model)"));
    if (!body.contains("adapter_b")) return send_error(res, ApiError::invalid("adapter_b", "adapter_b is required (a name, or null for the base model)"));
    if (auto e = read_adapter(ctx, body, "adapter_a", spec.adapter_a)) return send_error(res, *e);
    if (auto e = read_adapter(ctx, body, "adapter_b", spec.adapter_b)) return send_error(res, *e);
  } else if (auto e = read_adapter(ctx, body, "adapter", spec.adapter_a)) {
    return send_error(res, *e);
  }
  auto id = ctx.evals->submit(spec);
  if (!id.ok()) {
    ApiError e = ApiError::from_status(id.status());
    if (id.status().code() == ErrorCode::kResourceExhausted) {
      e.http_status = 503;
      e.code = "eval_queue_full";
      e.retry_after_secs = 10;
    }
    return send_error(res, e);
  }
  auto job = ctx.evals->get(*id, false);
  send_json(res, 200, {{"job_id", *id}, {"kind", spec.kind}, {"state", job.ok() ? Json((*job)["state"]) : Json("queued")},
                       {"suite", spec.suite}});
}

// The dataset of a synthesize body: `examples` inline or `dataset_path` (JSONL on the server).
std::optional<ApiError> read_dataset(const ServerContext& ctx, const Json& body, nlohmann::json& out, std::string& path) {
  const bool inline_data = body.contains("examples"), file = body.contains("dataset_path");
  if (inline_data && file) return ApiError::invalid("dataset_path", "give examples or dataset_path, not both");
  if (inline_data) {
    out = nlohmann::json(body["examples"]);
    path = "examples";
    return std::nullopt;
  }
  if (!file) return ApiError::invalid("examples", "examples is required (or dataset_path)");
  if (!body["dataset_path"].is_string()) return ApiError::invalid("dataset_path", "dataset_path must be a string");
  auto resolved = dataset_file(ctx, body["dataset_path"].get<std::string>());
  if (!resolved.ok()) return ApiError::invalid("dataset_path", resolved.status().message());
  std::ifstream in(*resolved);
  if (!in) return ApiError::invalid("dataset_path", "dataset_path: cannot read " + *resolved);
  out = nlohmann::json::array();
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto j = parse_json(line, "dataset_path: line " + std::to_string(n));
    if (!j.ok()) return ApiError::invalid("dataset_path", j.status().message());
    out.push_back(std::move(*j));
  }
  path = "dataset_path";  // errors then name the line's 0-based example: dataset_path[i]
  return std::nullopt;
}

void synthesize(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  if (auto e = unavailable(ctx)) return send_error(res, *e);
  Json body;
  if (auto e = parse_body(req, body)) return send_error(res, *e);
  FieldReader r(body, "", {"name", "examples", "dataset_path", "holdout_fraction", "seed", "scorer", "max_tokens",
                           "chat_template_kwargs", "overwrite"});
  SynthesizeSpec spec;
  auto name = r.string("name");
  if (auto v = r.number("holdout_fraction", 0, 1)) spec.holdout_fraction = *v;
  if (auto v = r.integer("seed", 0, INT64_MAX)) spec.seed = static_cast<uint64_t>(*v);
  if (auto v = r.integer("max_tokens", 1, 32768)) spec.max_tokens = *v;
  const bool overwrite = r.boolean("overwrite").value_or(false);
  if (!r.ok()) return send_error(res, *r.error());
  if (!name) return send_error(res, ApiError::invalid("name", "name is required (the suite's)"));
  spec.name = *name;
  if (body.contains("scorer")) {
    ScorerSpec probe;
    if (auto e = parse_scorer(nlohmann::json(body["scorer"]), "scorer", probe)) return send_error(res, from_field(*e));
    spec.scorer = nlohmann::json(body["scorer"]);
  }
  if (body.contains("chat_template_kwargs")) {
    if (!body["chat_template_kwargs"].is_object())
      return send_error(res, ApiError::invalid("chat_template_kwargs", "chat_template_kwargs must be an object"));
    spec.chat_template_kwargs = nlohmann::json(body["chat_template_kwargs"]);
  }
  nlohmann::json data;
  std::string path;
  if (auto e = read_dataset(ctx, body, data, path)) return send_error(res, *e);
  EvalSuite suite;
  if (auto e = synthesize_suite(spec, data, path, suite)) return send_error(res, from_field(*e));
  Status st = ctx.eval_suites->save(suite, overwrite);
  if (st.code() == ErrorCode::kFailedPrecondition) {
    ApiError e = ApiError::invalid("name", st.message());
    e.http_status = 409;
    e.code = "suite_exists";
    return send_error(res, e);
  }
  if (!st.ok()) return send_error(res, ApiError::from_status(st));
  send_json(res, 200, Json(suite.summary()));
}

}  // namespace

void add_eval_routes(httplib::Server& server, ServerContext& ctx) {
  server.Post("/v1/eval/suites", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    Json body;
    if (auto e = parse_body(req, body)) return send_error(res, *e);
    EvalSuite suite;
    bool overwrite = false;
    if (auto e = parse_suite(nlohmann::json(body), suite, &overwrite)) return send_error(res, from_field(*e));
    Status st = ctx.eval_suites->save(suite, overwrite);
    if (st.code() == ErrorCode::kFailedPrecondition) {
      ApiError e = ApiError::invalid("name", st.message());
      e.http_status = 409;
      e.code = "suite_exists";
      return send_error(res, e);
    }
    if (!st.ok()) return send_error(res, ApiError::from_status(st));
    send_json(res, 200, Json(suite.summary()));
  });
  server.Get("/v1/eval/suites", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    Json data = Json::array();
    for (const EvalSuite& s : ctx.eval_suites->list()) data.push_back(Json(s.summary()));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  server.Get(R"(/v1/eval/suites/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    auto s = ctx.eval_suites->load(req.matches[1]);
    if (!s.ok()) return send_error(res, not_found_error("name", "suite_not_found", s.status().message()));
    send_json(res, 200, Json(s->detail()));
  });
  server.Delete(R"(/v1/eval/suites/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    const std::string name = req.matches[1];
    Status st = ctx.eval_suites->remove(name);
    if (st.code() == ErrorCode::kNotFound) return send_error(res, not_found_error("name", "suite_not_found", st.message()));
    if (!st.ok()) return send_error(res, ApiError::from_status(st));
    send_json(res, 200, {{"name", name}, {"deleted", true}});
  });
  server.Post("/v1/eval/run", [&ctx](const httplib::Request& req, httplib::Response& res) { submit(ctx, false, req, res); });
  server.Post("/v1/eval/compare", [&ctx](const httplib::Request& req, httplib::Response& res) { submit(ctx, true, req, res); });
  server.Get("/v1/eval/jobs", [&ctx](const httplib::Request&, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    Json data = Json::array();
    for (const auto& j : ctx.evals->list()) data.push_back(Json(j));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });
  server.Get(R"(/v1/eval/jobs/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    const std::string id = req.matches[1];
    auto j = ctx.evals->get(id, true);
    if (!j.ok()) return send_error(res, not_found_error("job_id", "job_not_found", "no eval job '" + id + "'"));
    send_json(res, 200, Json(*j));
  });
  server.Delete(R"(/v1/eval/jobs/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    if (auto e = unavailable(ctx)) return send_error(res, *e);
    const std::string id = req.matches[1];
    if (!ctx.evals->get(id, false).ok())
      return send_error(res, not_found_error("job_id", "job_not_found", "no eval job '" + id + "'"));
    auto info = ctx.evals->cancel(id);
    if (!info.ok()) return send_error(res, ApiError::from_status(info.status(), "job_id"));
    auto j = ctx.evals->get(id, false);
    Json out = j.ok() ? Json(*j) : Json::object();
    out["cancel_requested"] = true;
    send_json(res, 200, out);
  });
  server.Post("/v1/eval/synthesize", [&ctx](const httplib::Request& req, httplib::Response& res) { synthesize(ctx, req, res); });
}

}  // namespace kiln
