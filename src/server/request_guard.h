// RequestGuard: the rules every request meets before a route sees it, held in one pre-routing
// middleware (cpp-httplib runs it before it reads the body): the Host header against DNS
// rebinding (421), the Origin of requests that change state against cross-site requests (403;
// configured origins get CORS headers), the API key (401), and the body's framing, size and
// content type (400, 411, 413, 415). A refused request's body is never read and its connection
// is closed. Refusals are counted in Metrics by their code. docs/security.md lists the rules.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <httplib.h>

#include "config/kiln_config.h"
#include "server/api_error.h"

namespace kiln {

class Metrics;

// What a route's body is: JSON (every route but two), an adapter archive, a dataset file.
enum class BodyKind { kJson, kArchive, kDataset };
BodyKind body_kind(const std::string& method, const std::string& path);

struct GuardOptions {
  std::string api_key;                       // "" : no key is asked for
  bool metrics_public = false;               // /metrics without the key
  std::vector<std::string> local_hosts;      // this machine's names and addresses, lower case
  std::vector<std::string> allowed_hosts;    // server.allowed_hosts: names, ".suffix" entries, "*"
  std::vector<std::string> allowed_origins;  // server.allowed_origins: "scheme://host[:port]"
  int64_t max_json_bytes = 0;                // server.max_body_bytes
  int64_t max_archive_bytes = 0;             // an adapter upload
  int64_t max_dataset_bytes = 0;             // training.max_dataset_bytes
};

// The key from server.api_key or server.api_key_file (its first line; both set is an error),
// the host lists and the body caps. A host that is not a loopback address without a key is
// refused, saying why: anyone who reaches the port could then upload, train and load adapters.
Result<GuardOptions> guard_options(const KilnConfig& config);

// The key in the file at `path`: its first line without surrounding blanks. Errors name `source`
// (the setting or flag that gave the path) and the path. The CLI's clients read theirs this way too.
Result<std::string> read_api_key_file(const std::string& path, const std::string& source);

// True for 127.0.0.0/8, ::1 and "localhost".
bool is_loopback_host(const std::string& host);

class RequestGuard {
 public:
  explicit RequestGuard(GuardOptions options);

  // nullopt: the request may go on to its route. Otherwise the error to answer.
  std::optional<ApiError> check(const httplib::Request& req) const;
  // An allowed cross-origin caller's request: the CORS headers that let its browser read the answer.
  void add_cors_headers(const httplib::Request& req, httplib::Response& res) const;
  // A CORS preflight (OPTIONS with Access-Control-Request-Method) from an allowed origin.
  bool is_allowed_preflight(const httplib::Request& req) const;
  int64_t max_body_bytes() const;  // the largest any route takes (cpp-httplib's own cap)

  // Registers the guard as `server`'s pre-routing handler; refusals are counted in `metrics`.
  // The guard must outlive the server.
  void install(httplib::Server& server, Metrics& metrics) const;

 private:
  bool host_allowed(const std::string& host_header) const;
  bool origin_allowed(const std::string& origin) const;
  std::optional<ApiError> check_body(const httplib::Request& req) const;

  GuardOptions o_;
  std::string key_digest_;  // SHA-256 of the key, compared in constant time
};

}  // namespace kiln
