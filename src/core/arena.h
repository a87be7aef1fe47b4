// A bump allocator over one aligned host block: scratch memory for a forward pass, released
// all at once by reset().
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/tensor.h"

namespace kiln {

class HostArena {
 public:
  explicit HostArena(size_t capacity_bytes = 0);
  // Grows (dropping nothing still in use is the caller's duty: only grow between resets).
  void reserve(size_t capacity_bytes);
  // A 64-byte aligned, uninitialised tensor valid until reset(). Grows the arena if needed.
  Tensor alloc(Shape shape, DType dtype);
  void reset() {
    used_ = 0;
    retired_.clear();
  }
  size_t used() const { return used_; }
  size_t capacity() const { return block_ ? block_->bytes() : 0; }
  size_t high_water() const { return high_water_; }

 private:
  std::shared_ptr<Storage> block_;
  // Blocks outgrown while tensors from them may still be alive; freed on reset.
  std::vector<std::shared_ptr<Storage>> retired_;
  size_t used_ = 0;
  size_t high_water_ = 0;
};

}  // namespace kiln
