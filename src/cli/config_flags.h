// The configuration flags shared by every command that runs from a KilnConfig (`kiln config`,
// `kiln serve`): --config FILE, --set KEY=VALUE (repeatable) and the shorthands --host, --port,
// --model, --backend, --profile, --api-key, --api-key-file; and their resolution together with KILN_* and kiln.toml.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "config/config_loader.h"
#include "core/status.h"

namespace kiln::cli {

struct ConfigFlags {
  std::string config_path;              // --config
  std::vector<FlagOverride> overrides;  // --set and the shorthands, in command-line order
};

// Registers the flags on `cmd`; `flags` must outlive the parse. Later flags for the same key win
// (`--port 1 --set server.port=2` gives 2).
void add_config_flags(CLI::App& cmd, ConfigFlags& flags);

// The effective configuration from the flags, the process's KILN_* variables and the TOML file
// (--config, else KILN_CONFIG, else ./kiln.toml when present).
Result<ResolvedConfig> resolve(const ConfigFlags& flags);

}  // namespace kiln::cli
