// ResolvedConfig: the effective configuration of one process and, for every field, the level that
// supplied its value (default, kiln.toml, a KILN_* environment variable or a command-line flag).
#pragma once

#include <functional>
#include <map>
#include <string>

#include "config/kiln_config.h"

namespace kiln {

enum class ConfigSource { kDefault, kFile, kEnv, kFlag };

// "default", "file", "env", "flag".
const char* config_source_name(ConfigSource source);

struct FieldOrigin {
  ConfigSource source = ConfigSource::kDefault;
  // kFile: the file's path; kEnv: the variable ("KILN_SERVER_PORT"); kFlag: the flag as given
  // ("--port", "--set server.port"); kDefault: "".
  std::string where;
};

struct ResolvedConfig {
  KilnConfig config;
  std::string file;                                         // the kiln.toml that was read; "" : none
  std::map<std::string, FieldOrigin, std::less<>> origins;  // by dotted name; every schema field
};

}  // namespace kiln
