// The JSON document a bench command prints on stdout, also written to the file of its --out.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace kiln::cli {

// Prints `doc` (indented, one trailing newline) and, when `out_path` is not empty, writes the same
// text there (replacing the file); the error names the flag and the path.
Status emit_document(const nlohmann::json& doc, const std::string& out_path);

}  // namespace kiln::cli
