// Safetensors checkpoints: one file or shards listed by model.safetensors.index.json, read by
// mmap with every header entry validated before use; and a streaming writer.
#pragma once

#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

struct TensorEntry {
  Tensor tensor;     // a view into the mapped file
  std::string file;  // the file it lives in, for error messages
};

class Checkpoint {
 public:
  // Which tensors to take: the others are neither checked nor entered, and a shard the index
  // gives none of the kept tensors is never opened (a multimodal checkpoint's vision tower).
  using Keep = std::function<bool(const std::string& name)>;
  // `dir` holds model.safetensors or model.safetensors.index.json (+ shards).
  static Result<Checkpoint> open(const std::string& dir, const Keep& keep = nullptr);
  // One safetensors file (used by tests and the reference fixtures too).
  static Result<Checkpoint> open_file(const std::string& path);

  const std::map<std::string, TensorEntry>& tensors() const { return tensors_; }
  const TensorEntry* find(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  uint64_t total_bytes() const { return total_bytes_; }
  size_t skipped() const { return skipped_; }  // tensors `keep` declined, in the files opened or the index

 private:
  Status add_file(const std::string& path, const Keep& keep = nullptr);
  std::map<std::string, TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
  uint64_t total_bytes_ = 0;
  size_t skipped_ = 0;
};

// Writes a safetensors file whose header is known up front; tensor data then streams in the
// declared order, so no tensor need exist in memory whole.
class SafetensorsWriter {
 public:
  struct Spec {
    std::string name;
    DType dtype;
    Shape shape;
  };
  static Result<std::unique_ptr<SafetensorsWriter>> create(const std::string& path, std::vector<Spec> specs,
                                                           const std::map<std::string, std::string>& metadata = {});
  ~SafetensorsWriter();
  // Appends raw bytes of the current tensor; tensors are completed in declaration order.
  Status write(const void* data, size_t bytes);
  Status finish();  // checks every declared byte was written, then closes the file

 private:
  SafetensorsWriter() = default;
  std::FILE* f_ = nullptr;
  std::string path_;
  uint64_t expected_ = 0, written_ = 0;
};

// Writes whole host tensors (small checkpoints, fixtures, tests).
Status write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

}  // namespace kiln
