// The dataset routes: training data larger than a request body, kept in training.data_dir.
// POST /v1/datasets?name=NAME[&replace=true] streams its body (JSONL: one JSON object a line) to
// a staging file, checks every line, and renames it into place (core/atomic_publish);
// GET /v1/datasets lists them; DELETE /v1/datasets/{name} removes one. A job names a dataset by
// `dataset_path`: NAME.
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/atomic_publish.h"
#include "core/json_text.h"
#include "core/names.h"
#include "server/route_support.h"
#include "server/routes.h"

namespace kiln {

namespace {

namespace fs = std::filesystem;

// Every non-blank line is a JSON object of at most `max_line` bytes; returns the line count or
// the first bad line (1-based) and why.
Result<int64_t> check_jsonl(const std::string& path, int64_t max_line) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return io_error("cannot read back " + path);
  std::string line;
  int64_t n = 0, lines = 0;
  Status bad;
  auto finish_line = [&]() {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) return;
    auto j = parse_json(line, "line " + std::to_string(n));
    if (!j.ok()) bad = j.status();
    else if (!j->is_object()) bad = invalid_argument("line " + std::to_string(n) + " is not a JSON object");
    ++lines;
  };
  char buf[1 << 16];
  size_t got = 0;
  while (bad.ok() && (got = std::fread(buf, 1, sizeof buf, f)) > 0) {
    for (size_t i = 0; i < got && bad.ok(); ++i) {
      if (buf[i] == '\n') {
        finish_line();
        line.clear();
      } else if (static_cast<int64_t>(line.size()) >= max_line) {
        bad = invalid_argument("line " + std::to_string(n + 1) + " is longer than " + std::to_string(max_line) +
                               " bytes (server.max_body_bytes)");
      } else {
        line += buf[i];
      }
    }
  }
  std::fclose(f);
  if (bad.ok() && !line.empty()) finish_line();
  if (!bad.ok()) return bad;
  if (lines == 0) return invalid_argument("the dataset holds no lines with data");
  return lines;
}

std::optional<ApiError> read_name(const httplib::Request& req, std::string& name) {
  name = req.get_param_value("name");
  if (name.empty()) return ApiError::invalid("name", "name is required (the query parameter ?name=NAME)");
  if (Status st = check_folder_name("dataset name", name); !st.ok()) return ApiError::invalid("name", st.message());
  return std::nullopt;
}

}  // namespace

void add_dataset_routes(httplib::Server& server, ServerContext& ctx) {
  server.Post("/v1/datasets", [&ctx](const httplib::Request& req, httplib::Response& res,
                                     const httplib::ContentReader& read) {
    // Refusals before the body is read close the connection (its bytes must not be taken for a
    // request).
    std::string name;
    if (auto e = read_name(req, name)) return send_error_and_close(res, *e);
    const std::string replace = req.has_param("replace") ? req.get_param_value("replace") : "false";
    if (replace != "true" && replace != "false")
      return send_error_and_close(res, ApiError::invalid("replace", "replace must be true or false"));
    const std::string dest = (fs::path(ctx.data_dir) / name).string();
    if (std::error_code ec; fs::exists(dest, ec) && replace != "true")
      return send_error_and_close(res, ApiError::conflict("name", "dataset '" + name + "' already exists (add replace=true)"));
    if (std::error_code ec; !fs::create_directories(ctx.data_dir, ec) && ec)
      return send_error_and_close(res, ApiError::from_status(io_error("training.data_dir " + ctx.data_dir + ": " + ec.message())));
    const int64_t cap = ctx.config.training.max_dataset_bytes;
    int64_t bytes = 0;
    bool complete = false;
    Result<int64_t> lines = int64_t{0};
    // The body streams into a staging file that core/atomic_publish renames into place once every
    // line checks out; any failure leaves nothing behind.
    const Status written = write_file_atomically(
        dest,
        [&](const std::string& staged) -> Status {
          std::FILE* f = std::fopen(staged.c_str(), "wb");
          if (!f) return io_error("cannot create " + staged + ": " + std::strerror(errno));
          bool write_failed = false;
          // Past the cap the rest is read and dropped, up to kDrainBytes more, so that the client,
          // still sending, hears the 413 on a connection that stays usable; beyond that it closes.
          complete = read([&](const char* data, size_t n) {
            bytes += static_cast<int64_t>(n);
            if (bytes > cap) return bytes <= cap + kDrainBytes;
            if (std::fwrite(data, 1, n, f) != n) return !(write_failed = true);
            return true;
          });
          const bool closed = std::fclose(f) == 0;
          if (bytes > cap) return resource_exhausted("over the cap");
          if (write_failed || !closed) return io_error("cannot write " + staged + ": " + std::strerror(errno));
          if (!complete) return invalid_argument("the body ended before its announced length");
          lines = check_jsonl(staged, ctx.config.server.max_body_bytes);
          return lines.ok() ? Status() : lines.status();
        },
        replace == "true" ? PublishMode::kReplace : PublishMode::kCreateNew);
    if (bytes > cap) {
      ApiError e = ApiError::invalid("body", "the dataset is larger than training.max_dataset_bytes (" + std::to_string(cap) + ")");
      e.http_status = 413;
      e.code = "body_too_large";
      return complete ? send_error(res, e) : send_error_and_close(res, e);
    }
    if (!complete) return send_error_and_close(res, ApiError::invalid("body", "the body ended before its announced length"));
    if (!lines.ok()) return send_error(res, ApiError::invalid("body", "the dataset is not JSONL: " + lines.status().message()));
    if (written.code() == ErrorCode::kFailedPrecondition)
      return send_error(res, ApiError::conflict("name", "dataset '" + name + "' already exists (add replace=true)"));
    if (!written.ok()) return send_error(res, ApiError::from_status(written));
    send_json(res, 200, {{"object", "dataset"}, {"name", name}, {"bytes", bytes}, {"lines", *lines}, {"dataset_path", name}});
  });

  server.Get("/v1/datasets", [&ctx](const httplib::Request&, httplib::Response& res) {
    Json data = Json::array();
    std::error_code ec;
    std::vector<fs::directory_entry> entries;
    for (const auto& e : fs::directory_iterator(ctx.data_dir, ec)) entries.push_back(e);
    std::sort(entries.begin(), entries.end());
    for (const auto& e : entries) {
      const std::string name = e.path().filename().string();
      if (!check_folder_name("dataset name", name).ok() || !e.is_regular_file(ec)) continue;
      data.push_back({{"object", "dataset"}, {"name", name}, {"bytes", e.file_size(ec)}});
    }
    send_json(res, 200, {{"object", "list"}, {"data", data}});
  });

  server.Delete(R"(/v1/datasets/([^/]+))", [&ctx](const httplib::Request& req, httplib::Response& res) {
    const std::string name = req.matches[1];
    if (Status st = check_folder_name("dataset name", name); !st.ok()) return send_error(res, ApiError::invalid("name", st.message()));
    const fs::path file = fs::path(ctx.data_dir) / name;
    std::error_code ec;
    if (!fs::is_regular_file(fs::symlink_status(file, ec))) {
      ApiError e = ApiError::invalid("name", "no dataset '" + name + "' in " + ctx.data_dir);
      e.http_status = 404;
      e.code = "dataset_not_found";
      return send_error(res, e);
    }
    if (!fs::remove(file, ec) || ec) return send_error(res, ApiError::from_status(io_error("cannot remove " + file.string() + ": " + ec.message())));
    send_json(res, 200, {{"object", "dataset"}, {"name", name}, {"deleted", true}});
  });
}

}  // namespace kiln
