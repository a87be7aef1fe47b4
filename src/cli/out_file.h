// The JSON document a bench command prints on stdout, also written to the file of its --out,
// stamped with the commit the binary was built from (core/build_stamp.h) and the native switches
// set (backend/native_switches.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln::cli {

// Adds `build` (the binary's commit and dirty flag) and `native_switches` to `doc`, prints it (indented, one trailing
// newline) and, when `out_path` is not empty, writes the same text there (replacing the file); the
// error names the flag and the path.
Status emit_document(nlohmann::json doc, const std::string& out_path);

}  // namespace kiln::cli
