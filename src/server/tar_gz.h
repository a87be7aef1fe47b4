// The adapter archives of GET /v1/adapters/{name}/download and POST /v1/adapters/upload: a flat
// directory of regular files as a POSIX ustar archive compressed with gzip (zlib). Archives are
// written deterministically (files in name order, mode 0644, mtime 0, no owner names), so the same
// directory always gives the same bytes. The reader takes what `tar czf` writes of one directory
// (entries optionally under one top-level folder or "./"), refuses links, devices, nested folders,
// absolute or ".." names, and stops at `max_bytes` of uncompressed data.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace kiln {

struct ArchiveFile {
  std::string name;  // a plain file name, no '/'
  std::string data;
};

std::string write_tar_gz(const std::vector<ArchiveFile>& files);
// One gzip member holding `raw` (what write_tar_gz compresses its archive with).
std::string gzip_bytes(std::string_view raw);
Result<std::vector<ArchiveFile>> read_tar_gz(std::string_view gz, uint64_t max_bytes);

// The regular files directly inside `dir`, by name (subfolders are an error naming them).
Result<std::vector<ArchiveFile>> read_flat_directory(const std::string& dir);

}  // namespace kiln
