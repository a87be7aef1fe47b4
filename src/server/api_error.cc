#include "server/api_error.h"

namespace kiln {

nlohmann::json ApiError::to_json() const {
  nlohmann::json e = {{"message", message}, {"type", type}};
  e["code"] = code.empty() ? nlohmann::json(nullptr) : nlohmann::json(code);
  e["param"] = param.empty() ? nlohmann::json(nullptr) : nlohmann::json(param);
  return {{"error", e}};
}

ApiError ApiError::invalid(std::string param, std::string message) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.code = "invalid_value";
  e.param = std::move(param);
  return e;
}

ApiError ApiError::conflict(std::string param, std::string message) {
  ApiError e = invalid(std::move(param), std::move(message));
  e.http_status = 409;
  e.type = "conflict_error";
  e.code = "conflict";
  return e;
}

ApiError ApiError::from_status(const Status& st, std::string param) {
  ApiError e;
  e.message = st.message();
  e.param = std::move(param);
  switch (st.code()) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kUnsupported:
      e.http_status = 400;
      e.code = "invalid_value";
      break;
    case ErrorCode::kNotFound:
      e.http_status = 404;
      e.code = "not_found";
      break;
    case ErrorCode::kFailedPrecondition:
      e.http_status = 409;
      e.type = "conflict_error";
      e.code = "conflict";
      break;
    case ErrorCode::kResourceExhausted:
      e.http_status = 503;
      e.type = "server_overloaded";
      e.code = "queue_full";
      e.retry_after_secs = 1;
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

}  // namespace kiln
