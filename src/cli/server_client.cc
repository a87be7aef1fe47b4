#include "cli/server_client.h"

namespace kiln::cli {

Result<ServerClient> ServerClient::connect(const std::string& url, ApiKey key) {
  const size_t scheme_end = url.find("://");
  if (scheme_end == std::string::npos || url.substr(0, scheme_end) != "http")
    return invalid_argument("--url \"" + url + "\" must start with http://");
  const size_t path = url.find('/', scheme_end + 3);
  ServerClient c;
  c.url_ = url;
  c.prefix_ = path == std::string::npos ? "" : url.substr(path);
  while (!c.prefix_.empty() && c.prefix_.back() == '/') c.prefix_.pop_back();
  const std::string host = url.substr(0, path);
  if (host.size() == scheme_end + 3) return invalid_argument("--url \"" + url + "\" names no host");
  c.client_ = std::make_shared<httplib::Client>(host);
  c.client_->set_connection_timeout(10, 0);
  c.client_->set_read_timeout(600, 0);
  c.client_->set_write_timeout(600, 0);
  if (!key.key.empty()) c.client_->set_bearer_token_auth(key.key);
  c.key_ = std::move(key);
  return c;
}

Result<ServerClient> ServerClient::connect(const std::string& url, const std::string& api_key_file) {
  KILN_ASSIGN_OR_RETURN(ApiKey key, resolve_api_key(api_key_file));
  return connect(url, std::move(key));
}

Result<nlohmann::json> ServerClient::call(const std::string& method, const std::string& path, const nlohmann::json& body) {
  const std::string full = prefix_ + path;
  httplib::Result r = method == "GET"      ? client_->Get(full.c_str())
                      : method == "DELETE" ? client_->Delete(full.c_str())
                                           : client_->Post(full.c_str(), body.is_null() ? "{}" : body.dump(), "application/json");
  if (!r) return io_error(method + " " + url_ + path + ": " + httplib::to_string(r.error()) + " (is `kiln serve` running there?)");
  const nlohmann::json answer = nlohmann::json::parse(r->body, nullptr, false);
  const bool has_error = answer.is_object() && answer.contains("error") && answer["error"].is_object();
  std::string message = has_error ? answer["error"].value("message", r->body) : r->body;
  // Before the JSON check: a proxy in front of the server may answer 401 in its own words.
  if (r->status == 401) return unauthorized(url_, key_, "HTTP 401: " + message);
  if (answer.is_discarded())
    return format_error(method + " " + path + " answered HTTP " + std::to_string(r->status) + " with a body that is not JSON");
  if (r->status < 200 || r->status >= 300) {
    if (has_error && answer["error"]["param"].is_string())
      message += " (field " + answer["error"]["param"].get<std::string>() + ")";
    const ErrorCode code = r->status == 404 ? ErrorCode::kNotFound
                           : r->status == 400 ? ErrorCode::kInvalidArgument
                           : r->status == 503 ? ErrorCode::kResourceExhausted
                                              : ErrorCode::kFailedPrecondition;
    return Status(code, method + " " + path + ": HTTP " + std::to_string(r->status) + ": " + message);
  }
  return answer;
}

}  // namespace kiln::cli
