#include "server/json_post.h"

#include <httplib.h>

namespace kiln {

Result<std::string> post_json(const std::string& field, const std::string& url, const nlohmann::json& body,
                              int64_t timeout_seconds) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0) return invalid_argument(field + " '" + url + "': only http:// URLs are supported");
  const size_t slash = url.find('/', scheme.size());
  const std::string host_port = url.substr(scheme.size(), slash == std::string::npos ? std::string::npos : slash - scheme.size());
  const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  if (host_port.empty()) return invalid_argument(field + " '" + url + "' names no host");
  httplib::Client cli(scheme + host_port);
  const time_t secs = static_cast<time_t>(timeout_seconds);
  cli.set_connection_timeout(secs, 0);
  cli.set_read_timeout(secs, 0);
  cli.set_write_timeout(secs, 0);
  auto res = cli.Post(path.c_str(), body.dump(), "application/json");
  if (!res) return io_error(field + " " + url + ": " + httplib::to_string(res.error()));
  if (res->status < 200 || res->status >= 300) return io_error(field + " " + url + " answered HTTP " + std::to_string(res->status));
  return res->body;
}

}  // namespace kiln
