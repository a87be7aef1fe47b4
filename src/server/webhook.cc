#include "server/webhook.h"

#include <chrono>

#include "server/json_post.h"

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
  JsonEndpoint to;
  to.field = "training.webhook_url";
  to.url = url;
  to.timeout_seconds = 5;
  return post_json(to, body).status();
}

}  // namespace kiln
