// The adapter archives of GET /v1/adapters/{name}/download and POST /v1/adapters/upload, a flat
// folder of regular files as tar.gz, read and written by libarchive a piece at a time so that
// memory stays bounded whatever the size. Written archives are deterministic (files in name
// order, mode 0644, mtime 0, no owner names, no gzip timestamp). The reader takes what `tar czf`
// writes of one folder (entries optionally under one top-level folder or "./") and refuses links,
// devices, nested folders, absolute and ".." names before anything of theirs is written.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

struct archive;  // libarchive's handle

namespace kiln {

// Extracts the tar.gz at `archive_path` into the existing, empty folder `dir`; returns how many
// files it wrote. kResourceExhausted when the files total more than `max_bytes` (extraction stops
// there); kInvalidArgument naming the entry for a link, device, absolute or ".." name, nested
// folder or duplicate; kFormatError for data that is not tar.gz or ends early.
Result<size_t> extract_tar_gz(const std::string& archive_path, const std::string& dir, uint64_t max_bytes);

// The regular files directly inside a folder as tar.gz, produced in pieces.
class TarGzStream {
 public:
  // Opens every file up front, so the archive is of one version even if the folder is replaced
  // meanwhile. Subfolders and other non-regular entries are an error naming them.
  static Result<std::unique_ptr<TarGzStream>> open(const std::string& dir);
  ~TarGzStream();
  // Appends the next piece of the archive to `out` (possibly nothing, while the compressor holds
  // it); false once the archive is complete.
  Result<bool> next(std::string& out);

 private:
  struct File {
    std::string name;
    int fd = -1;
    uint64_t size = 0;
  };
  TarGzStream() = default;
  Status archive_error(const std::string& what) const;

  std::string dir_;
  std::vector<File> files_;  // by name
  size_t index_ = 0;         // the file being written
  uint64_t left_ = 0;        // its bytes not yet written
  bool in_entry_ = false;    // its header is written
  bool closed_ = false;
  ::archive* a_ = nullptr;
  std::string* out_ = nullptr;  // where libarchive's output goes during next()
};

}  // namespace kiln
