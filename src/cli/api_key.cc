#include "cli/api_key.h"

#include <cstdlib>

#include "server/request_guard.h"

namespace kiln::cli {

void add_api_key_file_option(CLI::App& cmd, std::string& key_file) {
  cmd.add_option("--api-key-file", key_file,
                 std::string("File whose first line is the server's API key, sent as 'Authorization: Bearer <key>' "
                             "(default: $") + kApiKeyEnv + "; neither: no key)")
      ->check(CLI::ExistingFile);
}

Result<ApiKey> resolve_api_key(const std::string& key_file) {
  if (!key_file.empty()) {
    KILN_ASSIGN_OR_RETURN(std::string key, read_api_key_file(key_file, "--api-key-file"));
    return ApiKey{std::move(key), "--api-key-file " + key_file};
  }
  const char* env = std::getenv(kApiKeyEnv);
  if (env != nullptr && *env != '\0') return ApiKey{env, kApiKeyEnv};
  return ApiKey{};
}

Status unauthorized(const std::string& url, const ApiKey& key, const std::string& answer) {
  if (key.key.empty())
    return failed_precondition("the server at " + url + " requires an API key: set " + kApiKeyEnv +
                               " or --api-key-file (" + answer + ")");
  return failed_precondition("the server at " + url + " refused the API key of " + key.source + " (" + answer + ")");
}

}  // namespace kiln::cli
