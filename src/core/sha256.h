// SHA-256 digests of bytes and files, as lowercase hex, through OpenSSL's EVP interface.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

std::string sha256_hex(std::string_view bytes);

// A digest fed piece by piece (a download as it arrives).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, size_t bytes);
  std::string hex();  // the digest of everything fed; the object then starts over

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

struct FileDigest {
  std::string sha256;  // lowercase hex, no prefix
  uint64_t bytes = 0;
};

// Streams the file, so multi-gigabyte weight shards never sit in memory.
Result<FileDigest> sha256_file(const std::string& path);

}  // namespace kiln
