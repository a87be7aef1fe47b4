// The adapter routes (docs/serving.md): GET /v1/adapters lists what is loaded;
// POST /v1/adapters/load {"name", "path"?} loads (or reloads, as the next revision) a PEFT
// directory, by default <adapter_dir>/<name>; POST /v1/adapters/unload {"name"} unloads;
// DELETE /v1/adapters/{name} unloads and removes <adapter_dir>/<name>. Requests already
// submitted keep the adapters they resolved. GET /v1/adapters/{name}/download streams the
// directory as tar.gz; POST /v1/adapters/upload?name=NAME takes one as it arrives (spooled to
// disk, extracted into a staging folder, validated as an adapter of the served model before it
// lands, atomically; server.max_adapter_bytes caps it); POST /v1/adapters/merge combines loaded or
// on-disk adapters (train/adapter_merge.h). The default adapter (used by requests naming none)
// is shown in the list, set by load's "default": true, and cleared by unloading it.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <optional>

#include "core/confined_path.h"
#include "server/route_support.h"
#include "server/routes.h"
#include "server/tar_gz.h"
#include "train/adapter_merge.h"
#include "train/adapter_publish.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

Json adapter_json(const LoadedAdapter& a, const std::string& default_name = "") {
  const LoraConfig& c = a.adapter->config();
  Json targets = Json::array();
  for (LoraTarget t : c.targets) targets.push_back(std::string(lora_target_name(t)));
  return Json{{"name", a.name},   {"object", "adapter"}, {"revision", a.revision}, {"path", a.path},
              {"rank", c.rank},   {"alpha", c.alpha},    {"targets", targets},   {"default", a.name == default_name}};
}

// Where an adapter named in a merge comes from: the loaded one (its factors copied to the host on
// the engine's thread), else <adapter_dir>/<name> read from disk.
Result<HostLoraAdapter> find_adapter(const ServerContext& ctx, const std::string& name) {
  KILN_RETURN_IF_ERROR(AdapterRegistry::check_name(name));
  if (ctx.adapters)
    if (auto a = ctx.adapters->resolve(name); a.ok()) {
      StorageFacet& storage = ctx.train_env.model->backend().storage();
      return run_on_device(ctx.train_env.run_on_device, [&] { return a->adapter->download(storage); });
    }
  const std::string dir = (fs::path(ctx.adapter_dir) / name).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return not_found("adapter '" + name + "' is neither loaded nor in " + ctx.adapter_dir);
  return HostLoraAdapter::read(dir, ctx.train_env.model->config());
}

// 507: the loaded-adapter limits leave no room (AdapterRegistry::set_limits).
ApiError no_room(const Status& st) {
  ApiError e = ApiError::invalid("name", st.message());
  e.http_status = 507;
  e.type = "server_error";
  e.code = "adapter_capacity";
  return e;
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

// 409: publishing `name` would replace an adapter the request did not ask to replace.
ApiError exists(const ServerContext& ctx, const std::string& name, const std::string& param, const std::string& how) {
  return ApiError::conflict(param, "adapter '" + name + "' already exists in " + ctx.adapter_dir + " (add " + how + ")");
}

// 413 naming the limit.
ApiError too_large(const std::string& what, uint64_t cap) {
  ApiError e = ApiError::invalid("body", what + " server.max_adapter_bytes (" + std::to_string(cap) + " bytes)");
  e.http_status = 413;
  e.code = "body_too_large";
  return e;
}

// Reads the body without keeping it, up to `limit` bytes; true when it was read whole.
bool discard_body(const httplib::ContentReader& read, uint64_t limit) {
  uint64_t n = 0;
  return read([&n, limit](const char*, size_t len) { return (n += len) <= limit; });
}

// Loads an adapter just published at `path` (upload's and merge's "load"), noting it in `out`.
std::optional<ApiError> load_published(ServerContext& ctx, const std::string& name, const std::string& path, Json& out) {
  if (!ctx.adapters) return std::nullopt;
  auto loaded = ctx.adapters->load(name, path);
  if (!loaded.ok())
    return loaded.status().code() == ErrorCode::kResourceExhausted ? no_room(loaded.status())
                                                                   : ApiError::from_status(loaded.status());
  out["loaded"] = true;
  out["revision"] = loaded->revision;
  return std::nullopt;
}

std::optional<ApiError> read_object(const httplib::Request& req, Json& body) {
  if (auto e = parse_body(req, body)) return e;
  if (!body.is_object()) return ApiError::invalid("", "the request body must be a JSON object");
  return std::nullopt;
}

}  // namespace

namespace {

// GET /v1/adapters: what is loaded, and the default.
void list_adapters(ServerContext& ctx, const httplib::Request& /*req*/, httplib::Response& res) {
  Json data = Json::array();
  const std::string def = ctx.adapters ? ctx.adapters->default_name() : "";
  if (ctx.adapters)
    for (const LoadedAdapter& a : ctx.adapters->list()) data.push_back(adapter_json(a, def));
  send_json(res, 200, {{"object", "list"}, {"data", data}, {"default_adapter", def.empty() ? Json(nullptr) : Json(def)}});
}

// POST /v1/adapters/load {"name", "path"?, "default"?}.
void load_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = read_object(req, body)) return send_error(res, *e);
  FieldReader r(body, "", {"name", "path", "default"});
  std::string name;
  if (auto e = read_name(r, name)) return send_error(res, *e);
  std::string path = name;
  if (auto v = r.string("path")) path = *v;
  const bool make_default = r.boolean("default").value_or(false);
  if (!r.ok()) return send_error(res, *r.error());
  if (!ctx.adapters) return send_error(res, ApiError::from_status(failed_precondition("adapters cannot be loaded here")));
  // A path names a folder inside model.adapter_dir (relative to it, or absolute inside it).
  auto dir = confined_dir({ctx.adapter_dir, "model.adapter_dir"}, path, "path");
  if (!dir.ok())
    return send_error(res, dir.status().code() == ErrorCode::kNotFound ? not_loaded("path", "no adapter directory at '" + path + "' in " + ctx.adapter_dir)
                                                                      : ApiError::invalid("path", dir.status().message()));
  path = *dir;
  std::vector<std::string> evicted;
  auto loaded = ctx.adapters->load(name, path, &evicted);
  if (!loaded.ok()) {
    // Files that are there but do not make an adapter of this model are the request's fault.
    ApiError e = ApiError::invalid("path", loaded.status().message());
    if (loaded.status().code() == ErrorCode::kNotFound) e = not_loaded("path", loaded.status().message());
    if (loaded.status().code() == ErrorCode::kResourceExhausted) e = no_room(loaded.status());
    return send_error(res, e);
  }
  if (make_default)
    if (Status st = ctx.adapters->set_default(name); !st.ok()) return send_error(res, ApiError::from_status(st, "name"));
  Json out = adapter_json(*loaded, ctx.adapters->default_name());
  out["unloaded"] = evicted;  // what the loaded-adapter limits made room by unloading
  send_json(res, 200, out);
}

// POST /v1/adapters/unload {"name"}.
void unload_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = read_object(req, body)) return send_error(res, *e);
  FieldReader r(body, "", {"name"});
  std::string name;
  if (auto e = read_name(r, name)) return send_error(res, *e);
  Status st = ctx.adapters ? ctx.adapters->unload(name) : not_found("adapter '" + name + "' is not loaded");
  if (!st.ok()) return send_error(res, not_loaded("name", st.message()));
  send_json(res, 200, {{"name", name}, {"object", "adapter"}, {"unloaded", true}});
}

// DELETE /v1/adapters/{name}: unloads and removes <adapter_dir>/<name>.
void delete_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  if (Status st = AdapterRegistry::check_name(name); !st.ok())
    return send_error(res, ApiError::invalid("name", st.message()));
  const bool unloaded = ctx.adapters && ctx.adapters->unload(name).ok();
  const fs::path dir = fs::path(ctx.adapter_dir) / name;
  std::error_code ec;
  const bool on_disk = fs::exists(dir, ec);
  if (!unloaded && !on_disk)
    return send_error(res, not_loaded("name", "adapter '" + name + "' is neither loaded nor in " + ctx.adapter_dir));
  if (on_disk)
    if (Status st = remove_published(ctx.adapter_dir, name); !st.ok()) return send_error(res, ApiError::from_status(st));
  send_json(res, 200, {{"name", name}, {"object", "adapter"}, {"deleted", true}, {"unloaded", unloaded},
                       {"removed", on_disk ? Json(dir.string()) : Json(nullptr)}});
}

// GET /v1/adapters/{name}/download: the directory as tar.gz, streamed.
void download_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  const std::string name = req.matches[1];
  if (Status st = AdapterRegistry::check_name(name); !st.ok())
    return send_error(res, ApiError::invalid("name", st.message()));
  const std::string dir = (fs::path(ctx.adapter_dir) / name).string();
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return send_error(res, not_loaded("name", "no adapter '" + name + "' in " + ctx.adapter_dir));
  auto stream = TarGzStream::open(dir);
  if (!stream.ok()) return send_error(res, ApiError::from_status(stream.status()));
  std::shared_ptr<TarGzStream> archive = std::move(*stream);
  res.status = 200;
  res.set_header("Content-Disposition", "attachment; filename=\"" + name + ".tar.gz\"");
  res.set_chunked_content_provider("application/gzip", [archive](size_t, httplib::DataSink& sink) {
    std::string piece;
    for (;;) {  // until the compressor has something to send, or the end
      auto more = archive->next(piece);
      if (!more.ok()) return false;  // cuts the response short: the client sees no clean end
      if (!*more) {
        if (!piece.empty() && !sink.write(piece.data(), piece.size())) return false;
        sink.done();
        return true;
      }
      if (!piece.empty()) return sink.write(piece.data(), piece.size());
    }
  });
}

// POST /v1/adapters/upload?name=NAME[&replace=true][&load=true]: the body is the tar.gz.
void upload_adapter(ServerContext& ctx, const httplib::Request& req, httplib::Response& res,
                    const httplib::ContentReader& read_body) {
  // The request guard refuses a Content-Length over the cap before routing; a chunked body is
  // counted here as it streams in.
  const uint64_t cap = static_cast<uint64_t>(ctx.config.server.max_adapter_bytes);
  // A refusal before the body is spooled still reads it, so that the client gets the answer.
  auto refuse = [&](const ApiError& e) {
    if (discard_body(read_body, cap)) send_error(res, e);
    else send_error_and_close(res, e);
  };
  const std::string name = req.get_param_value("name");
  if (name.empty()) return refuse(ApiError::invalid("name", "name is required (the query parameter ?name=NAME)"));
  if (Status st = AdapterRegistry::check_name(name); !st.ok()) return refuse(ApiError::invalid("name", st.message()));
  auto flag = [&req](const char* key) -> std::optional<bool> {
    if (!req.has_param(key)) return false;
    const std::string v = req.get_param_value(key);
    if (v == "true" || v == "1") return true;
    if (v == "false" || v == "0") return false;
    return std::nullopt;
  };
  const auto replace = flag("replace"), load = flag("load");
  if (!replace) return refuse(ApiError::invalid("replace", "replace must be true or false"));
  if (!load) return refuse(ApiError::invalid("load", "load must be true or false"));
  const fs::path dest = fs::path(ctx.adapter_dir) / name;
  std::error_code ec;
  if (fs::exists(dest, ec) && !*replace) return refuse(exists(ctx, name, "name", "replace=true"));

  // The body goes to a spool file as it arrives, then is extracted from there: memory stays
  // bounded however large the archive.
  std::optional<StagedFolder> spool;
  if (auto s = StagedFolder::create(ctx.adapter_dir, name + ".upload"); s.ok()) spool.emplace(std::move(*s));
  else return refuse(ApiError::from_status(s.status()));
  const std::string body_path = spool->path() + "/body.tar.gz";
  const int fd = ::open(body_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return refuse(ApiError::from_status(io_error("cannot create " + body_path + ": " + std::strerror(errno))));
  uint64_t received = 0;
  std::string write_error;
  // Past the cap the rest is read and dropped, up to kDrainBytes more, so that the client, still
  // sending, hears the 413 on a connection that stays usable; beyond that it closes.
  const bool whole = read_body([&](const char* data, size_t n) {
    received += n;
    if (received > cap) return received <= cap + static_cast<uint64_t>(kDrainBytes);
    for (size_t done = 0; done < n && write_error.empty();) {  // after a failed write: read on, drop
      const ssize_t w = ::write(fd, data + done, n - done);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) write_error = "cannot write " + body_path + ": " + std::strerror(errno);
      else done += static_cast<size_t>(w);
    }
    return true;
  });
  ::close(fd);
  if (received > cap) {
    const ApiError e = too_large("the adapter archive is larger than", cap);
    return whole ? send_error(res, e) : send_error_and_close(res, e);
  }
  if (!whole)
    return send_error_and_close(res, ApiError::invalid("body", "the body ended early, after " + std::to_string(received) + " bytes"));
  if (!write_error.empty()) return send_error(res, ApiError::from_status(io_error(write_error)));
  auto staged = stage_adapter(ctx.adapter_dir, name);
  if (!staged.ok()) return send_error(res, ApiError::from_status(staged.status()));
  auto files = extract_tar_gz(body_path, staged->path(), cap);
  spool.reset();
  if (!files.ok() && files.status().code() == ErrorCode::kResourceExhausted)
    return send_error(res, too_large("the adapter archive's files total more than", cap));
  if (!files.ok() && files.status().code() == ErrorCode::kIoError)
    return send_error(res, ApiError::from_status(files.status()));
  if (!files.ok()) return send_error(res, ApiError::invalid("body", "the body is not an adapter archive: " + files.status().message()));
  auto path = publish_staged(*staged, ctx.train_env.model->config(), *replace ? PublishMode::kReplace : PublishMode::kCreateNew);
  if (!path.ok() && path.status().code() == ErrorCode::kFailedPrecondition) return send_error(res, exists(ctx, name, "name", "replace=true"));
  if (!path.ok() && path.status().code() == ErrorCode::kIoError) return send_error(res, ApiError::from_status(path.status()));
  if (!path.ok()) return send_error(res, ApiError::invalid("body", path.status().message()));
  Json out = {{"name", name}, {"object", "adapter"}, {"path", *path}, {"files", *files}, {"loaded", false}};
  if (*load)
    if (auto e = load_published(ctx, name, *path, out)) return send_error(res, *e);
  send_json(res, 200, out);
}

// POST /v1/adapters/merge {sources, method, output_name, ...}.
void merge_adapters_route(ServerContext& ctx, const httplib::Request& req, httplib::Response& res) {
  Json body;
  if (auto e = read_object(req, body)) return send_error(res, *e);
  FieldReader r(body, "", {"sources", "method", "output_name", "density", "rank", "load", "replace"});
  MergeOptions opt;
  if (auto m = r.string("method")) {
    if (*m == "concat") opt.method = MergeMethod::kConcat;
    else if (*m == "weighted_average") opt.method = MergeMethod::kWeightedAverage;
    else if (*m == "ties") opt.method = MergeMethod::kTies;
    else r.fail("method", "method must be \"weighted_average\", \"ties\" or \"concat\", got \"" + *m + "\"");
  } else if (r.ok()) {
    r.fail("method", "method is required");
  }
  std::string output;
  if (auto v = r.string("output_name")) output = *v;
  else if (r.ok()) r.fail("output_name", "output_name is required");
  if (auto v = r.number("density", 0.0, 1.0, /*lo_open=*/true)) opt.density = *v;
  const int64_t max_rank = max_lora_rank(ctx);
  if (auto v = r.integer("rank", 1, max_rank)) opt.rank = *v;
  const bool load = r.boolean("load").value_or(false);
  const bool replace = r.boolean("replace").value_or(false);
  const Json* src = r.get("sources");
  if (r.ok() && (!src || !src->is_array() || src->empty() || src->size() > kMaxMergeSources))
    r.fail("sources", "sources must be a list of 1 to " + std::to_string(kMaxMergeSources) + " {\"name\", \"weight\"}");
  if (!r.ok()) return send_error(res, *r.error());
  if (Status st = AdapterRegistry::check_name(output); !st.ok()) return send_error(res, ApiError::invalid("output_name", st.message()));
  if (std::error_code ec; !replace && fs::exists(fs::path(ctx.adapter_dir) / output, ec))
    return send_error(res, exists(ctx, output, "output_name", "\"replace\": true"));
  std::deque<HostLoraAdapter> held;  // MergeSource points into it
  std::vector<MergeSource> sources;
  for (size_t i = 0; i < src->size(); ++i) {
    const std::string path = "sources[" + std::to_string(i) + "]";
    FieldReader sr((*src)[i], path, {"name", "weight"});
    MergeSource s;
    if (auto v = sr.string("name")) s.name = *v;
    else if (sr.ok()) sr.fail("name", path + ".name is required");
    if (auto v = sr.number("weight", -1e6, 1e6)) s.weight = *v;
    if (!sr.ok()) return send_error(res, *sr.error());
    auto a = find_adapter(ctx, s.name);
    if (!a.ok()) {
      ApiError e = a.status().code() == ErrorCode::kNotFound ? not_loaded(path + ".name", a.status().message())
                                                              : ApiError::invalid(path + ".name", a.status().message());
      return send_error(res, e);
    }
    held.push_back(std::move(a).value());
    s.adapter = &held.back();
    sources.push_back(s);
  }
  // Concatenation stacks the sources' ranks; the other methods give `rank` or the largest source's.
  int64_t merged_rank = 0;
  for (const MergeSource& s : sources)
    merged_rank = opt.method == MergeMethod::kTies ? std::max(merged_rank, s.adapter->config.rank) : merged_rank + s.adapter->config.rank;
  if (opt.method == MergeMethod::kTies && opt.rank > 0) merged_rank = opt.rank;
  if (merged_rank > max_rank)
    return send_error(res, ApiError::invalid("sources", "the merged adapter would have rank " + std::to_string(merged_rank) +
                                                            "; the " + ctx.backend + " backend serves at most rank " +
                                                            std::to_string(max_rank)));
  const ModelConfig& mc = ctx.train_env.model->config();
  auto merged = merge_adapters(sources, opt, mc);
  if (!merged.ok()) return send_error(res, ApiError::from_status(merged.status(), "sources"));
  auto path = publish_adapter(*merged, nullptr, mc, ctx.adapter_dir, output);
  if (!path.ok()) return send_error(res, ApiError::from_status(path.status()));
  Json out = {{"name", output}, {"object", "adapter"}, {"path", *path}, {"rank", merged->config.rank},
              {"alpha", merged->config.alpha}, {"loaded", false}};
  if (load)
    if (auto e = load_published(ctx, output, *path, out)) return send_error(res, *e);
  send_json(res, 200, out);
}

}  // namespace

void add_adapter_routes(httplib::Server& server, ServerContext& ctx) {
  using Req = const httplib::Request&;
  using Res = httplib::Response&;
  server.Get("/v1/adapters", [&ctx](Req req, Res res) { list_adapters(ctx, req, res); });
  server.Post("/v1/adapters/load", [&ctx](Req req, Res res) { load_adapter(ctx, req, res); });
  server.Post("/v1/adapters/unload", [&ctx](Req req, Res res) { unload_adapter(ctx, req, res); });
  server.Delete(R"(/v1/adapters/([^/]+))", [&ctx](Req req, Res res) { delete_adapter(ctx, req, res); });
  server.Get(R"(/v1/adapters/([^/]+)/download)", [&ctx](Req req, Res res) { download_adapter(ctx, req, res); });
  server.Post("/v1/adapters/upload", [&ctx](Req req, Res res, const httplib::ContentReader& read) {
    upload_adapter(ctx, req, res, read);
  });
  server.Post("/v1/adapters/merge", [&ctx](Req req, Res res) { merge_adapters_route(ctx, req, res); });
}

}  // namespace kiln
