#include "core/temp_dir.h"

#include <stdlib.h>

#include <filesystem>

namespace kiln {

Result<TempDir> TempDir::create(std::string_view prefix) {
  std::error_code ec;
  const std::filesystem::path base = std::filesystem::temp_directory_path(ec);
  if (ec) return io_error("no temporary directory: " + ec.message());
  std::string tmpl = (base / (std::string(prefix) + "-XXXXXX")).string();
  if (::mkdtemp(tmpl.data()) == nullptr) return io_error("cannot create a temporary folder " + tmpl);
  return TempDir(std::move(tmpl));
}

TempDir& TempDir::operator=(TempDir&& other) noexcept {
  if (this != &other) {
    remove();
    path_ = std::move(other.path_);
    other.path_.clear();
  }
  return *this;
}

TempDir::~TempDir() { remove(); }

void TempDir::remove() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

}  // namespace kiln
