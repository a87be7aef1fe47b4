// A read-only memory map of a whole file, usable as tensor storage (weights load without a copy).
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

class MappedFile final : public Storage {
 public:
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile() override;
  const std::string& path() const { return path_; }
  const char* bytes_ptr() const { return static_cast<const char*>(data_); }

 private:
  MappedFile(void* data, size_t bytes, std::string path) : Storage(data, bytes, Device{}), path_(std::move(path)) {}
  std::string path_;
};

}  // namespace kiln
