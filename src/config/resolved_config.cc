#include "config/resolved_config.h"

namespace kiln {

const char* config_source_name(ConfigSource source) {
  switch (source) {
    case ConfigSource::kDefault: return "default";
    case ConfigSource::kFile: return "file";
    case ConfigSource::kEnv: return "env";
    case ConfigSource::kFlag: return "flag";
  }
  return "unknown";
}

}  // namespace kiln
