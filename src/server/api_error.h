// ApiError: the OpenAI-shaped error every route returns, {"error": {"message", "type", "code",
// "param"}}, with its HTTP status. Internal Statuses map onto it in one place (from_status).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string code;   // machine-readable, e.g. "invalid_value", "model_not_found"
  std::string param;  // the request field at fault ("messages[2].role"), "" if none
  int retry_after_secs = 0;  // > 0: sent as Retry-After (429/503)

  nlohmann::json to_json() const;

  // 400 naming `param`.
  static ApiError invalid(std::string param, std::string message);
  // 409 naming `param`: the request would replace something it did not ask to replace.
  static ApiError conflict(std::string param, std::string message);
  // The HTTP status an engine or loader Status deserves: kInvalidArgument 400, kNotFound 404,
  // kFailedPrecondition 409, kResourceExhausted 503 (with Retry-After), kUnsupported 400,
  // anything else 500.
  static ApiError from_status(const Status& st, std::string param = "");
};

}  // namespace kiln
