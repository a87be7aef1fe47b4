#include "server/request_guard.h"

#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>

#include "core/sha256.h"
#include "server/metrics.h"
#include "server/route_support.h"

namespace kiln {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = text.find(',', start);
    std::string item = lower(trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
    while (!item.empty() && item.back() == '/') item.pop_back();  // "https://app.example/" is that origin
    if (!item.empty()) out.push_back(item);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return out;
}

// "[::1]:8420" -> "::1", "example.com:80" -> "example.com", "example.com" -> "example.com".
std::string host_name(const std::string& host_header) {
  std::string h = lower(trim(host_header));
  if (!h.empty() && h.front() == '[') {
    const size_t close = h.find(']');
    return close == std::string::npos ? h : h.substr(1, close - 1);
  }
  if (std::count(h.begin(), h.end(), ':') == 1) h = h.substr(0, h.find(':'));
  if (!h.empty() && h.back() == '.') h.pop_back();  // "localhost." names localhost
  return h;
}

// This machine's interface addresses and host name: a server bound to every address answers
// to any of them.
std::vector<std::string> machine_hosts(const std::string& bound) {
  std::vector<std::string> out = {"localhost", "127.0.0.1", "::1"};
  if (!bound.empty()) out.push_back(host_name(bound));
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* a = list; a; a = a->ifa_next) {
      if (!a->ifa_addr) continue;
      char buf[INET6_ADDRSTRLEN] = {};
      if (a->ifa_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof buf);
      else if (a->ifa_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(a->ifa_addr)->sin6_addr, buf, sizeof buf);
      if (buf[0]) out.push_back(lower(buf));
    }
    freeifaddrs(list);
  }
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0 && name[0]) out.push_back(lower(name));
  return out;
}

bool changes_state(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// Routes any client may read without the key: the health check and the dashboard's own files
// (the dashboard then asks for the key before it calls the API).
bool open_route(const std::string& method, const std::string& path, bool metrics_public) {
  if (method != "GET" && method != "HEAD") return false;
  if (path == "/health" || path == "/" || path == "/ui" || path.rfind("/ui/", 0) == 0) return true;
  return metrics_public && path == "/metrics";
}

// The media type of a Content-Type value, without parameters, in lower case.
std::string media_type(const std::string& content_type) {
  return lower(trim(content_type.substr(0, content_type.find(';'))));
}

ApiError refusal(int status, std::string code, std::string param, std::string message) {
  ApiError e;
  e.http_status = status;
  e.code = std::move(code);
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

bool same_bytes(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Result<std::string> read_api_key_file(const std::string& path, const std::string& source) {
  std::ifstream in(path);
  if (!in) return not_found(source + ": cannot read " + path);
  std::string line;
  std::getline(in, line);
  std::string key = trim(line);
  if (key.empty()) return invalid_argument(source + ": " + path + " holds no key on its first line");
  return key;
}

bool is_loopback_host(const std::string& host) {
  const std::string h = host_name(host);
  if (h == "localhost" || h == "::1") return true;
  in_addr a{};
  return inet_pton(AF_INET, h.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

BodyKind body_kind(const std::string& method, const std::string& path) {
  if (method == "POST" && path == "/v1/adapters/upload") return BodyKind::kArchive;
  if (method == "POST" && path == "/v1/datasets") return BodyKind::kDataset;
  return BodyKind::kJson;
}

Result<GuardOptions> guard_options(const KilnConfig& config) {
  const ServerSection& s = config.server;
  GuardOptions o;
  if (!s.api_key.empty() && !s.api_key_file.empty())
    return invalid_argument("server.api_key and server.api_key_file are both set: give one");
  o.api_key = s.api_key;
  if (!s.api_key_file.empty()) {
    KILN_ASSIGN_OR_RETURN(o.api_key, read_api_key_file(s.api_key_file, "server.api_key_file"));
  }
  if (o.api_key.empty() && !is_loopback_host(s.host))
    return failed_precondition(
        "server.host is " + s.host +
        ", not a loopback address, and no API key is set: anyone who can reach the port could run the model, "
        "upload, train and load adapters. Set server.api_key_file (or --api-key-file FILE, or KILN_SERVER_API_KEY), "
        "or listen on 127.0.0.1 behind a reverse proxy (docs/security.md)");
  o.metrics_public = s.metrics_public;
  o.local_hosts = machine_hosts(s.host);
  o.allowed_hosts = split_list(s.allowed_hosts);
  o.allowed_origins = split_list(s.allowed_origins);
  o.max_json_bytes = s.max_body_bytes;
  o.max_archive_bytes = s.max_adapter_bytes;
  o.max_dataset_bytes = config.training.max_dataset_bytes;
  return o;
}

RequestGuard::RequestGuard(GuardOptions options) : o_(std::move(options)) {
  if (!o_.api_key.empty()) key_digest_ = sha256_hex(o_.api_key);
}

int64_t RequestGuard::max_body_bytes() const {
  return std::max({o_.max_json_bytes, o_.max_archive_bytes, o_.max_dataset_bytes});
}

bool RequestGuard::host_allowed(const std::string& host_header) const {
  if (host_header.empty()) return true;  // no browser sends a request without Host
  const std::string h = host_name(host_header);
  if (is_loopback_host(h) || std::find(o_.local_hosts.begin(), o_.local_hosts.end(), h) != o_.local_hosts.end())
    return true;
  for (const std::string& a : o_.allowed_hosts) {
    if (a == "*" || a == h) return true;
    if (a.front() == '.' && (h == a.substr(1) || (h.size() > a.size() && h.compare(h.size() - a.size(), a.size(), a) == 0)))
      return true;
  }
  return false;
}

bool RequestGuard::origin_allowed(const std::string& origin) const {
  std::string o = lower(trim(origin));
  while (!o.empty() && o.back() == '/') o.pop_back();
  return std::find(o_.allowed_origins.begin(), o_.allowed_origins.end(), o) != o_.allowed_origins.end();
}

bool RequestGuard::is_allowed_preflight(const httplib::Request& req) const {
  return req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method") &&
         origin_allowed(req.get_header_value("Origin"));
}

void RequestGuard::add_cors_headers(const httplib::Request& req, httplib::Response& res) const {
  if (!req.has_header("Origin") || !origin_allowed(req.get_header_value("Origin"))) return;
  res.set_header("Access-Control-Allow-Origin", req.get_header_value("Origin"));
  res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
  res.set_header("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS");
  res.set_header("Access-Control-Expose-Headers", "Retry-After");
  res.set_header("Access-Control-Max-Age", "600");
}

std::optional<ApiError> RequestGuard::check_body(const httplib::Request& req) const {
  const size_t lengths = req.get_header_value_count("Content-Length");
  const bool chunked = req.has_header("Transfer-Encoding");
  if (lengths > 1 || (lengths == 1 && chunked))
    return refusal(400, "invalid_framing", "Content-Length",
                   "the request gives its body's length twice (two Content-Length headers, or one with Transfer-Encoding)");
  const BodyKind kind = body_kind(req.method, req.path);
  const int64_t cap = kind == BodyKind::kJson      ? o_.max_json_bytes
                      : kind == BodyKind::kArchive ? o_.max_archive_bytes
                                                   : o_.max_dataset_bytes;
  const char* cap_key = kind == BodyKind::kJson      ? "server.max_body_bytes"
                        : kind == BodyKind::kArchive ? "server.max_adapter_bytes"
                                                     : "training.max_dataset_bytes";
  int64_t length = 0;
  if (lengths == 1) {
    const std::string v = trim(req.get_header_value("Content-Length"));
    if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return refusal(400, "invalid_framing", "Content-Length", "Content-Length '" + v + "' is not a byte count");
    length = std::stoll(v);
  } else if (chunked) {
    if (kind == BodyKind::kJson)  // the upload routes count a body's bytes as they arrive
      return refusal(411, "length_required", "Content-Length",
                     "send the body with Content-Length: bodies in chunked transfer encoding are refused on " + req.path);
  } else if (req.method == "POST" || req.method == "PUT" || req.method == "PATCH") {
    return refusal(411, "length_required", "Content-Length",
                   req.method + " " + req.path + " needs Content-Length (0 for an empty body)");
  }
  if (length > cap)
    return refusal(413, "body_too_large", "Content-Length",
                   "the request body is " + std::to_string(length) + " bytes; " + cap_key + " allows " + std::to_string(cap));
  if (length == 0 && !chunked) return std::nullopt;
  if (const std::string enc = lower(trim(req.get_header_value("Content-Encoding"))); !enc.empty() && enc != "identity")
    return refusal(415, "unsupported_media_type", "Content-Encoding",
                   "compressed request bodies (Content-Encoding: " + enc + ") are refused: send the body as it is");
  const std::string type = media_type(req.get_header_value("Content-Type"));
  std::vector<const char*> accepted;
  if (kind == BodyKind::kJson) accepted = {"application/json"};
  else if (kind == BodyKind::kArchive) accepted = {"application/gzip", "application/x-gzip", "application/octet-stream"};
  else accepted = {"application/jsonl", "application/x-ndjson", "application/json", "application/octet-stream"};
  for (const char* a : accepted)
    if (type == a) return std::nullopt;
  std::string list;
  for (const char* a : accepted) list += std::string(list.empty() ? "" : ", ") + a;
  return refusal(415, "unsupported_media_type", "Content-Type",
                 req.method + " " + req.path + " takes " + list + (type.empty() ? ", and the request names no Content-Type" : ", not " + type));
}

std::optional<ApiError> RequestGuard::check(const httplib::Request& req) const {
  if (!host_allowed(req.get_header_value("Host")))
    return refusal(421, "misdirected_request", "Host",
                   "this server does not answer to the host '" + req.get_header_value("Host") +
                       "' (add it to server.allowed_hosts if clients reach the server by that name)");
  if (changes_state(req.method) && req.has_header("Origin")) {
    const std::string origin = req.get_header_value("Origin");
    const size_t scheme = origin.find("://");
    const bool same = scheme != std::string::npos && lower(origin.substr(scheme + 3)) == lower(trim(req.get_header_value("Host")));
    if (!same && !origin_allowed(origin))
      return refusal(403, "cross_origin_refused", "Origin",
                     "a request from the web page at '" + origin + "' may not " + req.method + " " + req.path +
                         " (server.allowed_origins lists the origins that may)");
  }
  if (!key_digest_.empty() && !open_route(req.method, req.path, o_.metrics_public)) {
    const std::string auth = req.get_header_value("Authorization");
    if (auth.empty())
      return refusal(401, "invalid_api_key", "Authorization",
                     "this server requires an API key: send the header 'Authorization: Bearer <key>'");
    const size_t space = auth.find(' ');
    const std::string token = space == std::string::npos ? "" : trim(auth.substr(space + 1));
    if (space == std::string::npos || lower(auth.substr(0, space)) != "bearer" ||
        !same_bytes(sha256_hex(token), key_digest_))
      return refusal(401, "invalid_api_key", "Authorization", "the API key in the Authorization header is not this server's");
  }
  return check_body(req);
}

namespace {

// Refusals of bodies up to kDrainBytes are answered after the body is read and dropped; larger
// bodies, chunked ones and bodies of unknown length are not read: the connection closes after the
// answer.
// Where a refused request with a body to drain is routed (its path rewritten by the guard); the
// refusal waits for it on the thread that handles the request.
constexpr const char* kRefusedPath = "/.kiln-refused";
thread_local std::optional<ApiError> pending_refusal;

// Content-Length when it is the body's only framing, else -1.
int64_t drainable_length(const httplib::Request& req) {
  if (req.has_header("Transfer-Encoding") || req.get_header_value_count("Content-Length") != 1) return -1;
  const std::string v = req.get_header_value("Content-Length");
  if (v.empty() || v.size() > 18 || !std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(v);
}

}  // namespace

void RequestGuard::install(httplib::Server& server, Metrics& metrics) const {
  server.set_pre_routing_handler([this, &metrics](const httplib::Request& req, httplib::Response& res) {
    if (is_allowed_preflight(req)) {
      add_cors_headers(req, res);
      res.status = 204;
      return httplib::Server::HandlerResponse::Handled;
    }
    auto e = check(req);
    if (!e) {
      add_cors_headers(req, res);
      return httplib::Server::HandlerResponse::Unhandled;
    }
    metrics.request_refused(e->code);
    if (e->http_status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"kiln\"");
    const int64_t length = drainable_length(req);
    const bool reads_body = req.method == "POST" || req.method == "PUT" || req.method == "PATCH";
    if (length > 0 && length <= kDrainBytes && reads_body) {
      // cpp-httplib routes on req.path after this handler returns: send the request to the route
      // that reads and drops its body, then answers with the refusal.
      pending_refusal = std::move(*e);
      const_cast<httplib::Request&>(req).path = kRefusedPath;
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (length == 0) send_error(res, *e);
    else send_error_and_close(res, *e);
    return httplib::Server::HandlerResponse::Handled;
  });
  auto drain = [](const httplib::Request&, httplib::Response& res, const httplib::ContentReader& read) {
    std::optional<ApiError> e = std::move(pending_refusal);
    pending_refusal.reset();
    if (!e) return send_error(res, refusal(404, "not_found", "", std::string("no route ") + kRefusedPath));
    read([](const char*, size_t) { return true; });
    send_error(res, *e);
  };
  server.Post(kRefusedPath, drain);
  server.Put(kRefusedPath, drain);
  server.Patch(kRefusedPath, drain);
  // A client that waits for "100 Continue" before it sends its body hears the refusal instead
  // and sends nothing: the connection stays usable.
  server.set_expect_100_continue_handler([this, &metrics](const httplib::Request& req, httplib::Response& res) {
    auto e = check(req);
    if (!e) return 100;
    metrics.request_refused(e->code);
    if (e->http_status == 401) res.set_header("WWW-Authenticate", "Bearer realm=\"kiln\"");
    send_error_and_close(res, *e);
    return e->http_status;
  });
}

}  // namespace kiln
