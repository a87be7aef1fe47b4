// Calls to an operator-configured http:// URL (training.webhook_url, training.reward_url,
// training.teacher_url): the URL split into host and path, bounded connect/read/write timeouts,
// retries after a transport failure or a non-2xx answer, an optional bearer key (never in a
// message), a cap on the answer's bytes, a 2xx answer's body back. Errors name the configuration
// key and the URL.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

struct JsonEndpoint {
  std::string field;               // the configuration key that names the URL (in every error)
  std::string url;                 // http://host[:port][/path]
  int64_t timeout_seconds = 30;    // connect, read and write, each attempt
  int64_t retries = 0;             // further attempts after a transport failure or a non-2xx answer
  std::string bearer;              // sent as "Authorization: Bearer ..." when set
  size_t max_response_bytes = size_t{1} << 20;  // a longer answer fails the call (not retried)
};

// POST `body` to the endpoint's URL followed by `path` ("" : the URL itself).
Result<std::string> post_json(const JsonEndpoint& to, const nlohmann::json& body, const std::string& path = "");
// GET the endpoint's URL followed by `path`.
Result<std::string> get_json(const JsonEndpoint& to, const std::string& path);

}  // namespace kiln
