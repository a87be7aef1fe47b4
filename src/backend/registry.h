// The backends this binary knows of: those compiled in can be created; the rest are listed as
// not built, so reports show them rather than pretend.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace kiln {

struct BackendEntry {
  std::string name;
  bool built = false;
  std::string build_flags;  // how it was compiled, or why it was not
};

const std::vector<BackendEntry>& backend_registry();
Result<std::unique_ptr<Backend>> create_backend(std::string_view name);

}  // namespace kiln
