// training.webhook_url: a POST of {job_id, job_type, status, adapter_name, error, timestamp}
// when a training job ends (docs/training-api.md, "Jobs"). Delivery is best effort: one attempt with
// short timeouts; a failure is logged, never fatal.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "train/job_queue.h"

namespace kiln {

nlohmann::json webhook_body(const JobInfo& job);
// Posts `body` as JSON to `url` (http://host[:port][/path]); the status says what went wrong.
Status post_webhook(const std::string& url, const nlohmann::json& body);

}  // namespace kiln
