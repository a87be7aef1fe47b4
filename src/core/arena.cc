#include "core/arena.h"

#include <algorithm>

namespace kiln {

HostArena::HostArena(size_t capacity_bytes) {
  if (capacity_bytes) reserve(capacity_bytes);
}

void HostArena::reserve(size_t capacity_bytes) {
  if (capacity_bytes <= capacity()) return;
  if (block_) retired_.push_back(block_);
  block_ = allocate_host(capacity_bytes);
  used_ = 0;
}

Tensor HostArena::alloc(Shape shape, DType dtype) {
  size_t bytes = (static_cast<size_t>(shape.numel()) * dtype_size(dtype) + 63) / 64 * 64;
  if (used_ + bytes > capacity()) {
    // Tensors already handed out keep their block alive through shared ownership.
    if (block_) retired_.push_back(block_);
    block_ = allocate_host(std::max(bytes, capacity() * 2));
    used_ = 0;
  }
  Tensor t(block_, dtype, shape, used_);
  used_ += bytes;
  high_water_ = std::max(high_water_, used_);
  return t;
}

}  // namespace kiln
