// Publishing a file atomically and never over an existing one: write a private temporary in the
// same directory, fsync it, then link() it into place (which fails if the name exists).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::qualify {

// kFailedPrecondition when `path` already exists; the existing file is left untouched.
Status write_new_file_atomically(const std::string& path, std::string_view contents);

}  // namespace kiln::qualify
