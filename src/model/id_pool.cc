#include "model/id_pool.h"

#include <cassert>

namespace kiln {

IdPool::IdPool(int64_t capacity, std::string what) : what_(std::move(what)), refs_(static_cast<size_t>(capacity), 0) {
  for (int64_t i = capacity - 1; i >= 0; --i) free_.push_back(static_cast<int32_t>(i));
}

Result<int32_t> IdPool::acquire() {
  KILN_ASSIGN_OR_RETURN(std::vector<int32_t> one, acquire(1));
  return one[0];
}

Result<std::vector<int32_t>> IdPool::acquire(int64_t n) {
  if (n > free_count())
    return resource_exhausted("no free " + what_ + ": " + std::to_string(n) + " needed, " +
                              std::to_string(free_count()) + " free of " + std::to_string(capacity()));
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    ids.push_back(free_.back());
    free_.pop_back();
    refs_[static_cast<size_t>(ids.back())] = 1;
  }
  return ids;
}

void IdPool::retain(int32_t id) {
  assert(refs_[static_cast<size_t>(id)] > 0 && "retaining a free id");
  ++refs_[static_cast<size_t>(id)];
}

bool IdPool::release(int32_t id) {
  int32_t& r = refs_[static_cast<size_t>(id)];
  assert(r > 0 && "releasing a free id");
  if (--r > 0) return false;
  free_.push_back(id);
  return true;
}

}  // namespace kiln
