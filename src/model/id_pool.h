// IdPool: the one allocator of sequence state. A fixed set of ids (K/V blocks, GDN state slots)
// with reference counts; an id returns to the free list when its last holder releases it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace kiln {

class IdPool {
 public:
  // `what` names the resource in errors ("K/V block", "GDN state slot").
  IdPool(int64_t capacity, std::string what);
  IdPool() = default;

  // A free id with reference count 1.
  Result<int32_t> acquire();
  // `n` free ids, all or none (so a failed reservation leaves nothing behind).
  Result<std::vector<int32_t>> acquire(int64_t n);
  void retain(int32_t id);  // another holder of a live id (a shared prefix block)
  // Drops one reference; returns true when that freed the id.
  bool release(int32_t id);

  int32_t ref_count(int32_t id) const { return refs_[static_cast<size_t>(id)]; }
  int64_t free_count() const { return static_cast<int64_t>(free_.size()); }
  int64_t capacity() const { return static_cast<int64_t>(refs_.size()); }

 private:
  std::string what_;
  std::vector<int32_t> refs_;
  std::vector<int32_t> free_;  // LIFO: the lowest ids are handed out first
};

}  // namespace kiln
