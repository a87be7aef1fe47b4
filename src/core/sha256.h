// SHA-256 digests of bytes and files, as lowercase hex, through OpenSSL's EVP interface.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

std::string sha256_hex(std::string_view bytes);

struct FileDigest {
  std::string sha256;  // lowercase hex, no prefix
  uint64_t bytes = 0;
};

// Streams the file, so multi-gigabyte weight shards never sit in memory.
Result<FileDigest> sha256_file(const std::string& path);

}  // namespace kiln
