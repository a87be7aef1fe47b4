// The adapter routes (spec/api.md "Adapters"): GET /v1/adapters lists what is loaded;
// POST /v1/adapters/load {"name", "path"?} loads (or reloads, as the next revision) a PEFT
// directory, by default <adapter_dir>/<name>; POST /v1/adapters/unload {"name"} unloads;
// DELETE /v1/adapters/{name} unloads and removes <adapter_dir>/<name>. Requests already
// submitted keep the adapters they resolved.
#include <filesystem>

#include "server/route_support.h"
#include "server/routes.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

Json adapter_json(const LoadedAdapter& a) {
  const LoraConfig& c = a.adapter->config();
  Json targets = Json::array();
  for (LoraTarget t : c.targets) targets.push_back(std::string(lora_target_name(t)));
  return Json{{"name", a.name},   {"object", "adapter"}, {"revision", a.revision}, {"path", a.path},
              {"rank", c.rank},   {"alpha", c.alpha},    {"targets", targets}};
}

ApiError not_loaded(const std::string& param, const std::string& message) {
  ApiError e = ApiError::invalid(param, message);
  e.http_status = 404;
  e.code = "adapter_not_found";
  return e;
}

// The body's "name" (required, a valid adapter name), or the error naming the field.
std::optional<ApiError> read_name(FieldReader& r, std::string& name) {
  if (auto v = r.string("name")) name = *v;
  else if (r.ok()) r.fail("name", "name is required");
  if (!r.ok()) return r.error();
  if (Status st = AdapterRegistry::check_name(name); !st.ok()) return ApiError::invalid("name", st.message());
  return std::nullopt;
}

std::optional<ApiError> read_object(const httplib::Request& req, Json& body) {
  if (auto e = parse_body(req, body)) return e;
  if (!body.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return std::nullopt;
}

}  // namespace

void add_adapter_routes(httplib::Server& server, ServerContext& ctx) {
  server.Get("/v1/adapters", [&ctx](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    if (ctx.adapters)
      for (const LoadedAdapter& a : ctx.adapters->list()) data.push_back(adapter_json(a));
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });

  server.Post("/v1/adapters/load", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = read_object(req, body)) return send_error(res, *e);
    FieldReader r(body, "", {"name", "path"});
    std::string name;
    if (auto e = read_name(r, name)) return send_error(res, *e);
    std::string path = (fs::path(ctx.adapter_dir) / name).string();
    if (auto v = r.string("path")) path = *v;
    if (!r.ok()) return send_error(res, *r.error());
    if (!ctx.adapters) return send_error(res, ApiError::from_status(failed_precondition("adapters cannot be loaded here")));
    std::error_code ec;
    if (!fs::is_directory(path, ec))
      return send_error(res, not_loaded("path", "no adapter directory at '" + path + "'"));
    auto loaded = ctx.adapters->load(name, path);
    if (!loaded.ok()) {
      // Files that are there but do not make an adapter of this model are the request's fault.
      ApiError e = ApiError::invalid("path", loaded.status().message());
      if (loaded.status().code() == ErrorCode::kNotFound) e = not_loaded("path", loaded.status().message());
      return send_error(res, e);
    }
    send_json(res, 200, adapter_json(*loaded));
  });

  server.Post("/v1/adapters/unload", [&ctx](const httplib::Request& req, httplib::Response& res) {
    Json body;
    if (auto e = read_object(req, body)) return send_error(res, *e);
    FieldReader r(body, "", {"name"});
    std::string name;
    if (auto e = read_name(r, name)) return send_error(res, *e);
    Status st = ctx.adapters ? ctx.adapters->unload(name) : not_found("adapter '" + name + "' is not loaded");
    if (!st.ok()) return send_error(res, not_loaded("name", st.message()));
    send_json(res, 200, {{"name", name}, {"object", "adapter"}, {"unloaded", true}});
  });

  server.Delete(R"(/v1/adapters/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (Status st = AdapterRegistry::check_name(name); !st.ok())
      return send_error(res, ApiError::invalid("name", st.message()));
    const bool unloaded = ctx.adapters && ctx.adapters->unload(name).ok();
    const fs::path dir = fs::path(ctx.adapter_dir) / name;
    std::error_code ec;
    const bool on_disk = fs::exists(dir, ec);
    if (!unloaded && !on_disk)
      return send_error(res, not_loaded("name", "adapter '" + name + "' is neither loaded nor in " + ctx.adapter_dir));
    if (on_disk) {
      fs::remove_all(dir, ec);
      if (ec)
        return send_error(res, ApiError::from_status(io_error("cannot remove " + dir.string() + ": " + ec.message())));
    }
    send_json(res, 200, {{"name", name}, {"object", "adapter"}, {"deleted", true}, {"unloaded", unloaded},
                         {"removed", on_disk ? Json(dir.string()) : Json(nullptr)}});
  });
}

}  // namespace kiln
