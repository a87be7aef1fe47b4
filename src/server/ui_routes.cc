// The dashboard (docs/dashboard.md): GET /ui/ answers index.html and /ui/<file> the other files
// of ui/, all compiled into the binary (ui_assets.h); / and /ui redirect to /ui/. Also
// GET /v1/adapters/{name}/receipt, the adapter's train_receipt.json (its provenance panel).
#include <filesystem>
#include <fstream>
#include <sstream>

#include "server/route_support.h"
#include "server/routes.h"
#include "server/ui_assets.h"
#include "train/adapter_publish.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

ApiError not_found_error(const std::string& param, const std::string& code, const std::string& message) {
  ApiError e = ApiError::invalid(param, message);
  e.http_status = 404;
  e.code = code;
  return e;
}

void send_asset(httplib::Response& res, const std::string& name) {
  const UiAsset* a = find_ui_asset(name);
  if (!a) return send_error(res, not_found_error("path", "not_found", "no dashboard file '" + name + "'"));
  res.status = 200;
  // The files change only with the binary: revalidate each load rather than cache stale ones.
  res.set_header("Cache-Control", "no-cache");
  res.set_content(reinterpret_cast<const char*>(a->data), a->size, std::string(ui_content_type(name)));
}

}  // namespace

const UiAsset* find_ui_asset(std::string_view name) {
  for (const UiAsset& a : ui_assets())
    if (name == a.name) return &a;
  return nullptr;
}

std::string_view ui_content_type(std::string_view name) {
  auto ends = [name](std::string_view ext) { return name.size() >= ext.size() && name.substr(name.size() - ext.size()) == ext; };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".json")) return "application/json";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".ico")) return "image/x-icon";
  return "application/octet-stream";
}

void add_ui_routes(httplib::Server& server, ServerContext& ctx) {
  auto to_ui = [](const httplib::Request&, httplib::Response& res) { res.set_redirect("/ui/"); };
  server.Get("/", to_ui);
  server.Get("/ui", to_ui);
  server.Get("/ui/", [](const httplib::Request&, httplib::Response& res) { send_asset(res, "index.html"); });
  // Flat names only: the embedded files have no folders, and this keeps ".." out.
  server.Get(R"(/ui/([A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    send_asset(res, req.matches[1]);
  });

  server.Get(R"(/v1/adapters/([^/]+)/receipt)", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (Status st = AdapterRegistry::check_name(name); !st.ok())
      return send_error(res, ApiError::invalid("name", st.message()));
    // The loaded revision's directory first (it may have been loaded from elsewhere), else
    // <adapter_dir>/<name>.
    fs::path dir = fs::path(ctx.adapter_dir) / name;
    if (ctx.adapters)
      if (auto a = ctx.adapters->resolve(name); a.ok() && !a->path.empty()) dir = a->path;
    const fs::path file = dir / kTrainReceiptFile;
    std::ifstream in(file);
    if (!in)
      return send_error(res, not_found_error("name", "receipt_not_found",
                                             "adapter '" + name + "' has no " + file.string() +
                                                 " (adapters uploaded, merged or trained elsewhere may have none)"));
    std::stringstream text;
    text << in.rdbuf();
    Json receipt = Json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
    if (receipt.is_discarded())
      return send_error(res, ApiError::from_status(internal_error(file.string() + " is not valid JSON")));
    send_json(res, 200, receipt);
  });
}

}  // namespace kiln
