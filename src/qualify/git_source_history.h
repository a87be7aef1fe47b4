// The capability report's SourceHistory (report/freshness.h) answered by git: the repository
// holding a path, a commit the report speaks for, and the commits that touched a gate's paths.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "report/freshness.h"

namespace kiln::qualify {

// The repository containing `path`, the report speaking for `as_of` (a revision; "" for HEAD).
// Errors: no repository there, or `as_of` names no commit of it.
Result<std::unique_ptr<SourceHistory>> git_source_history(const std::string& path, const std::string& as_of);

}  // namespace kiln::qualify
