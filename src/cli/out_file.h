// `--out FILE` of the bench commands: the JSON document they print, also written to a file.
#pragma once

#include <string>

#include "core/status.h"

namespace kiln::cli {

// Writes `text` to `path` (replacing it); the error names the flag and the path.
Status write_out_file(const std::string& path, const std::string& text);

}  // namespace kiln::cli
