// Linear probing; the hash mixes eight bytes at a time.
#include "tokenizer/word_cache.h"

#include <cstring>

namespace kiln {

uint64_t WordCache::hash_of(std::string_view word) {
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
  return h | 1;  // never 0, which marks an empty slot
}

std::span<const WordCache::Id> WordCache::find(std::string_view word, bool* found) const {
  *found = false;
  if (slots_.empty() || word.size() > kMaxWordBytes) return {};
  const uint64_t h = hash_of(word);
  for (size_t i = h & (kCapacity - 1);; i = (i + 1) & (kCapacity - 1)) {
    const Slot& s = slots_[i];
    if (s.hash == 0) return {};
    if (s.hash == h && s.key_length == word.size() && std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      *found = true;
      return {ids_.data() + s.ids_offset, s.ids_length};
    }
  }
}

void WordCache::insert(std::string_view word, std::span<const Id> ids) {
  if (word.size() > kMaxWordBytes || ids.size() > UINT16_MAX) return;
  if (slots_.empty()) slots_.resize(kCapacity);
  if (count_ >= kCapacity / 2 || keys_.size() + word.size() > UINT32_MAX / 2) clear();
  const uint64_t h = hash_of(word);
  size_t i = h & (kCapacity - 1);
  while (slots_[i].hash != 0) {
    const Slot& s = slots_[i];
    if (s.hash == h && s.key_length == word.size() && std::memcmp(keys_.data() + s.key_offset, word.data(), word.size()) == 0) {
      return;  // already cached
    }
    i = (i + 1) & (kCapacity - 1);
  }
  Slot& s = slots_[i];
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
