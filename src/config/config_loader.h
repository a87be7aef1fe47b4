// Loading the configuration (docs/configuration.md, "Where values come from" and "Strictness"):
// defaults < kiln.toml < KILN_<SECTION>_<FIELD> environment variables < command-line flags, checked
// strictly against the schema, with every problem of every level reported together.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "config/resolved_config.h"
#include "core/status.h"

namespace kiln {

// One command-line setting of a field, as text; the loader parses it per the field's type.
struct FlagOverride {
  std::string key;    // dotted name, "server.port"
  std::string value;  // "9000"
  std::string flag;   // how it was spelled, for messages and origins ("--port"); "" : "--set <key>"
};

struct ConfigInputs {
  // The TOML file: config_path (--config) when given, else env KILN_CONFIG when set and non-empty;
  // a file named either way must exist. Otherwise default_file is read when it exists ("" : none).
  std::string config_path;
  std::string default_file = "kiln.toml";
  // KILN_* environment variables (kiln_environment() captures the process's). A variable is
  // configuration when its name starts with KILN_<SECTION>_ for a schema section (KILN_SERVER_,
  // KILN_PREFIX_CACHE_, ...); it must then name a field. Every other variable (KILN_CONFIG,
  // KILN_HOME, KILN_EVIDENCE_DIR, ...) belongs to some other part of Kiln and is ignored here.
  std::map<std::string, std::string> env;
  // In command-line order; a later one for the same key wins.
  std::vector<FlagOverride> flags;
};

// The process environment's variables whose names start with KILN_.
std::map<std::string, std::string> kiln_environment();

// Whether `name` is a configuration variable under the rule above (it may still name no field).
bool is_config_env_var(std::string_view name);

// The effective configuration, or kInvalidArgument listing every problem found (unknown sections
// and keys, wrong TOML types, unparsable env/flag text, out-of-range and non-enum values, a named
// file that does not exist), each with its key and where it came from (path:line:column, env
// variable, flag).
Result<ResolvedConfig> load_config(const ConfigInputs& in);

}  // namespace kiln
