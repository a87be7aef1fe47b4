#include "server/webhook.h"

#include <chrono>

#include <httplib.h>

namespace kiln {

nlohmann::json webhook_body(const JobInfo& job) {
  auto or_null = [](const std::string& s) { return s.empty() ? nlohmann::json(nullptr) : nlohmann::json(s); };
  return {{"job_id", job.id},
          {"job_type", job.type},
          {"status", job_state_name(job.state)},
          {"adapter_name", or_null(job.outcome.adapter_name)},
          {"error", or_null(job.error)},
          {"timestamp", std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count()}};
}

Status post_webhook(const std::string& url, const nlohmann::json& body) {
  const std::string scheme = "http://";
  if (url.rfind(scheme, 0) != 0)
    return invalid_argument("training.webhook_url '" + url + "': only http:// URLs are supported");
  const size_t slash = url.find('/', scheme.size());
  const std::string host_port = url.substr(scheme.size(), slash == std::string::npos ? std::string::npos : slash - scheme.size());
  const std::string path = slash == std::string::npos ? "/" : url.substr(slash);
  if (host_port.empty()) return invalid_argument("training.webhook_url '" + url + "' names no host");
  httplib::Client cli(scheme + host_port);
  cli.set_connection_timeout(5, 0);
  cli.set_read_timeout(5, 0);
  cli.set_write_timeout(5, 0);
  auto res = cli.Post(path.c_str(), body.dump(), "application/json");
  if (!res) return io_error("webhook " + url + ": " + httplib::to_string(res.error()));
  if (res->status < 200 || res->status >= 300)
    return io_error("webhook " + url + " answered HTTP " + std::to_string(res->status));
  return {};
}

}  // namespace kiln
