// The client side of `kiln train`, `kiln adapters`, `kiln eval` and `kiln bench correction`:
// JSON requests to a running Kiln server given by --url (http://HOST:PORT[/prefix]), with its API
// key when there is one (cli/api_key.h); an answer other than 2xx becomes an error carrying the
// server's message.
#pragma once

#include <memory>
#include <string>

#include <httplib.h>
#include <nlohmann/json.hpp>

#include "cli/api_key.h"
#include "core/status.h"

namespace kiln::cli {

inline constexpr const char* kDefaultServerUrl = "http://127.0.0.1:8420";

class ServerClient {
 public:
  static Result<ServerClient> connect(const std::string& url, ApiKey key);
  // The key from --api-key-file `api_key_file` ("": not given) or the environment.
  static Result<ServerClient> connect(const std::string& url, const std::string& api_key_file);
  // `body` null: no body (GET, DELETE).
  Result<nlohmann::json> call(const std::string& method, const std::string& path, const nlohmann::json& body = nullptr);
  const std::string& url() const { return url_; }

 private:
  std::string url_, prefix_;
  ApiKey key_;
  std::shared_ptr<httplib::Client> client_;
};

}  // namespace kiln::cli
