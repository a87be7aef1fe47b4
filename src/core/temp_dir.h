#pragma once
// A folder of one's own under the system's temporary directory (mkdtemp: a fresh name, mode
// 0700), removed with everything in it when the object goes away, however the work that used it
// ended: a bench's adapters, datasets and server state.
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln {

class TempDir {
 public:
  // <temporary directory>/<prefix>-XXXXXX.
  static Result<TempDir> create(std::string_view prefix);
  TempDir(TempDir&& other) noexcept : path_(std::move(other.path_)) { other.path_.clear(); }
  TempDir& operator=(TempDir&& other) noexcept;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::string& path() const { return path_; }

 private:
  explicit TempDir(std::string path) : path_(std::move(path)) {}
  void remove();
  std::string path_;
};

}  // namespace kiln
