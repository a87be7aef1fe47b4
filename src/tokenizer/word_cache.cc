// Linear probing over 16-byte slots; the hash mixes eight bytes at a time.
#include "tokenizer/word_cache.h"

#include <algorithm>
#include <cstring>

namespace kiln {

uint32_t WordCache::hash_of(std::string_view word) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (word.size() * 0xFF51AFD7ED558CCDull);
  size_t i = 0;
  for (; i + 8 <= word.size(); i += 8) {
    uint64_t w;
    std::memcpy(&w, word.data() + i, 8);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
  }
  if (i < word.size()) {
    uint64_t w = 0;
    std::memcpy(&w, word.data() + i, word.size() - i);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 29;
  }
  h *= 0xFF51AFD7ED558CCDull;
  h ^= h >> 32;
  return static_cast<uint32_t>(h) | 1;  // never 0, which marks an empty slot
}

// The slot holding `word`, or null with `index` at the empty slot where it would go.
const WordCache::Slot* WordCache::lookup(std::string_view word, uint32_t hash, size_t* index) const {
  const size_t mask = slots_.size() - 1;
  for (size_t i = hash & mask;; i = (i + 1) & mask) {
    const Slot& s = slots_[i];
    if (s.hash == 0) {
      *index = i;
      return nullptr;
    }
    if (s.hash == hash && s.key_length == word.size() &&
        std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      *index = i;
      return &s;
    }
  }
}

std::span<const WordCache::Id> WordCache::find(std::string_view word, bool* found) const {
  *found = false;
  if (slots_.empty() || word.size() > kMaxWordBytes) return {};
  size_t index;
  const Slot* s = lookup(word, hash_of(word), &index);
  if (s == nullptr) return {};
  *found = true;
  return {ids_.data() + s->ids_offset, s->ids_length};
}

void WordCache::grow() {
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(old.size() * 2, Slot{});
  const size_t mask = slots_.size() - 1;
  for (const Slot& s : old) {
    if (s.hash == 0) continue;
    size_t i = s.hash & mask;
    while (slots_[i].hash != 0) i = (i + 1) & mask;
    slots_[i] = s;
  }
}

void WordCache::insert(std::string_view word, std::span<const Id> ids) {
  if (word.size() > kMaxWordBytes || ids.size() > UINT16_MAX) return;
  if (slots_.empty()) slots_.assign(kInitialCapacity, Slot{});
  if (count_ >= slots_.size() / 2) {
    if (slots_.size() < kMaxCapacity) grow();
    else clear();
  }
  if (keys_.size() + word.size() > UINT32_MAX / 2 || ids_.size() + ids.size() > UINT32_MAX / 2) clear();
  const uint32_t h = hash_of(word);
  size_t index;
  if (lookup(word, h, &index) != nullptr) return;  // already cached
  Slot& s = slots_[index];
  s.hash = h;
  s.key_offset = static_cast<uint32_t>(keys_.size());
  s.key_length = static_cast<uint16_t>(word.size());
  s.ids_offset = static_cast<uint32_t>(ids_.size());
  s.ids_length = static_cast<uint16_t>(ids.size());
  keys_.append(word);
  ids_.insert(ids_.end(), ids.begin(), ids.end());
  ++count_;
}

void WordCache::clear() {
  std::fill(slots_.begin(), slots_.end(), Slot{});
  keys_.clear();
  ids_.clear();
  count_ = 0;
}

}  // namespace kiln
