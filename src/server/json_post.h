// One POST of a JSON body to an operator-configured http:// URL (training.webhook_url,
// training.reward_url): the URL split into host and path, bounded connect/read/write timeouts,
// a 2xx answer's body back. Errors name the config field and the URL.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

Result<std::string> post_json(const std::string& field, const std::string& url, const nlohmann::json& body,
                              int64_t timeout_seconds);

}  // namespace kiln
