// Renderings of a ResolvedConfig: JSON for GET /v1/config and `kiln config --json`, and plain text
// (one `name = value  (source)` line per field) for `kiln config`.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config/resolved_config.h"

namespace kiln {

// {"server": {"port": {"value": 8420, "source": "default"}, ...}, ...}, every schema field. A
// value from a file also carries "file": its path; from the environment, "env": the variable;
// from a flag, "flag": the flag as given.
nlohmann::json config_to_json(const ResolvedConfig& resolved);

// server.host = "127.0.0.1"  (default)
// server.port = 9000  (flag --port)
// Values are spelled as in kiln.toml; the source names the file, variable or flag.
std::string config_to_text(const ResolvedConfig& resolved);

}  // namespace kiln
