// A per-thread cache from a pre-tokenized word (raw bytes) to its BPE token ids: open addressing
// over flat arrays, so a hit costs one hash and one memcmp. The table grows with the working set
// (small tables stay in cache) and is cleared wholesale at its largest size.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

class WordCache {
 public:
  using Id = int32_t;

  // The cached ids of `word`, or an empty span with `found` false.
  std::span<const Id> find(std::string_view word, bool* found) const;
  void insert(std::string_view word, std::span<const Id> ids);
  void clear();
  size_t size() const { return count_; }

  static constexpr size_t kMaxWordBytes = 256;

 private:
  struct Slot {
    uint32_t hash = 0;  // 0: empty
    uint32_t key_offset = 0;
    uint32_t ids_offset = 0;
    uint16_t key_length = 0;
    uint16_t ids_length = 0;
  };
  static uint32_t hash_of(std::string_view word);
  const Slot* lookup(std::string_view word, uint32_t hash, size_t* index) const;
  void grow();

  static constexpr size_t kInitialCapacity = 1 << 12;  // slots; at most half are used
  static constexpr size_t kMaxCapacity = 1 << 18;
  std::vector<Slot> slots_;
  std::string keys_;
  std::vector<Id> ids_;
  size_t count_ = 0;
};

}  // namespace kiln
