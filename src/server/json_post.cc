#include "server/json_post.h"

#include <chrono>
#include <thread>

#include <httplib.h>

namespace kiln {

namespace {

// One attempt. `retry` is set when another attempt may answer differently (a transport failure,
// a non-2xx answer); an answer over the byte cap is final.
Result<std::string> attempt(const JsonEndpoint& to, const char* method, const std::string& path,
                            const nlohmann::json* body, bool& retry) {
  retry = false;
  const std::string scheme = "http://";
  const std::string& url = to.url;
  if (url.rfind(scheme, 0) != 0) return invalid_argument(to.field + " '" + url + "': only http:// URLs are supported");
  const size_t slash = url.find('/', scheme.size());
  const std::string host_port = url.substr(scheme.size(), slash == std::string::npos ? std::string::npos : slash - scheme.size());
  std::string full_path = slash == std::string::npos ? "" : url.substr(slash);
  if (!path.empty() && !full_path.empty() && full_path.back() == '/') full_path.pop_back();
  full_path += path;
  if (full_path.empty()) full_path = "/";
  if (host_port.empty()) return invalid_argument(to.field + " '" + url + "' names no host");
  httplib::Client cli(scheme + host_port);
  const time_t secs = static_cast<time_t>(to.timeout_seconds);
  cli.set_connection_timeout(secs, 0);
  cli.set_read_timeout(secs, 0);
  cli.set_write_timeout(secs, 0);
  httplib::Request req;
  req.method = method;
  req.path = full_path;
  if (!to.bearer.empty()) req.headers.emplace("Authorization", "Bearer " + to.bearer);
  if (body) {
    req.body = body->dump();
    req.headers.emplace("Content-Type", "application/json");
  }
  std::string answer;
  bool too_long = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (answer.size() + n > to.max_response_bytes) {
      too_long = true;
      return false;
    }
    answer.append(data, n);
    return true;
  };
  const std::string where = to.field + " " + url + (path.empty() ? "" : " (" + path + ")");
  httplib::Result res = cli.send(req);
  if (too_long)
    return resource_exhausted(where + " answered more than " + std::to_string(to.max_response_bytes) + " bytes");
  retry = true;
  if (!res) return io_error(where + ": " + httplib::to_string(res.error()));
  if (res->status < 200 || res->status >= 300)  // the start of its body says why
    return io_error(where + " answered HTTP " + std::to_string(res->status) +
                    (answer.empty() ? "" : ": " + answer.substr(0, 200)));
  retry = false;
  return answer;
}

Result<std::string> call(const JsonEndpoint& to, const char* method, const std::string& path, const nlohmann::json* body) {
  Status last;
  for (int64_t n = 0; n <= to.retries; ++n) {
    if (n > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 * n));
    bool retry = false;
    Result<std::string> r = attempt(to, method, path, body, retry);
    if (r.ok() || !retry) return r;
    last = r.status();
  }
  return to.retries == 0 ? last : last.with_context("after " + std::to_string(to.retries + 1) + " attempts");
}

}  // namespace

Result<std::string> post_json(const JsonEndpoint& to, const nlohmann::json& body, const std::string& path) {
  return call(to, "POST", path, &body);
}

Result<std::string> get_json(const JsonEndpoint& to, const std::string& path) { return call(to, "GET", path, nullptr); }

}  // namespace kiln
