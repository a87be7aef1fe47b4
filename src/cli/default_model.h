// The model a command uses when --model is not given: a random-weight `small` checkpoint,
// created on first use under $KILN_HOME (default ~/.cache/kiln).
#pragma once

#include <string>

#include "core/status.h"

namespace kiln::cli {

Result<std::string> resolve_model_dir(const std::string& flag);

}  // namespace kiln::cli
