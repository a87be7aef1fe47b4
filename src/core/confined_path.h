// Paths a client names (a dataset file, an adapter folder), confined to one of Kiln's folders:
// the path is resolved with symbolic links followed and must stay inside the folder; `..` is
// refused outright; a file must be a regular file within a size cap, so never /dev/zero, a FIFO
// or a socket. Relative paths are taken from the folder. Errors name `field` and the folder.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

struct ConfinedFolder {
  std::string path;  // the folder
  std::string key;   // the configuration key that names it ("training.data_dir"), for messages
};

// The resolved path of a regular file of at most `max_bytes` inside `folder`. kInvalidArgument for
// a path outside it or of the wrong kind, kNotFound when nothing is there.
Result<std::string> confined_file(const ConfinedFolder& folder, const std::string& path, std::string_view field,
                                  int64_t max_bytes);
// The resolved path of a directory inside `folder` (not the folder itself).
Result<std::string> confined_dir(const ConfinedFolder& folder, const std::string& path, std::string_view field);

}  // namespace kiln
