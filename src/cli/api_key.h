// The API key that the commands calling a running server (--url) send as
// `Authorization: Bearer <key>`: the first line of --api-key-file FILE when given, else
// KILN_SERVER_API_KEY (the variable `kiln serve` takes its own key from), else none; and what a
// server's 401 becomes.
#pragma once

#include <string>

#include <CLI/CLI.hpp>

#include "core/status.h"

namespace kiln::cli {

inline constexpr const char* kApiKeyEnv = "KILN_SERVER_API_KEY";

struct ApiKey {
  std::string key;     // "" : none, requests go without Authorization
  std::string source;  // where it came from, for messages: "--api-key-file PATH", "KILN_SERVER_API_KEY"
};

// Registers --api-key-file on a client command; `key_file` must outlive the parse.
void add_api_key_file_option(CLI::App& cmd, std::string& key_file);

// The key of `key_file` (its first line) when it is set, else of the environment; an unreadable
// or empty file is an error naming it.
Result<ApiKey> resolve_api_key(const std::string& key_file);

// A 401 from the server at `url` ("HTTP 401: <its message>" in `answer`): without a key, how to
// give one; with one, that the server refused it, naming where it came from.
Status unauthorized(const std::string& url, const ApiKey& key, const std::string& answer);

}  // namespace kiln::cli
