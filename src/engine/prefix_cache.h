// PrefixCache: complete, block-aligned prompt prefixes and the state to resume after them. A
// node per 64-token block, chained from a root that is the (model, adapter, revision) identity;
// each node holds one reference to its K/V block and, where the prefix ended a prefill chunk,
// a snapshot of the GDN state at that boundary (the state of a hybrid model cannot be rebuilt
// from K/V alone). A hit resumes at the deepest matching node that has a snapshot. Least
// recently used leaves are evicted to stay within the block and byte budgets.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_manager.h"
#include "engine/gdn_state_slots.h"

namespace kiln {

struct PrefixKey {
  std::string model;          // model identity (its directory or served id)
  std::string adapter;        // "" for the base model; else the stack, "name@revision*weight;" per adapter
};

struct PrefixCacheConfig {
  bool enabled = true;
  int64_t max_blocks = 1024;         // K/V blocks the cache may hold references to
  int64_t max_bytes = int64_t{1} << 32;  // K/V blocks + GDN snapshots, device bytes
};

struct PrefixHit {
  std::vector<int32_t> blocks;  // shared K/V blocks of the prefix
  int32_t snapshot = -1;        // GDN state slot at the end of the prefix
  int64_t tokens() const { return static_cast<int64_t>(blocks.size()) * ModelState::kBlockSize; }
};

class PrefixCache {
 public:
  PrefixCache(PrefixCacheConfig config, BlockManager& blocks, GdnStateSlots& slots, int64_t block_bytes)
      : config_(config), blocks_(blocks), slots_(slots), block_bytes_(block_bytes) {}
  ~PrefixCache() { clear(); }

  // The longest cached prefix of `prompt`, at most `max_tokens` long, that has a snapshot; empty
  // on a miss. Marks the matched chain as used.
  PrefixHit lookup(const PrefixKey& key, std::span<const int32_t> prompt, int64_t max_tokens);
  // Counts a lookup's outcome once its request is admitted (a request that waits for blocks
  // looks up again next cycle and must not count twice).
  void record(const PrefixHit& hit) { ++(hit.blocks.empty() ? misses_ : hits_); }
  // Caches the prefix `tokens` (a multiple of 64 long) whose K/V is in `table` and whose GDN
  // state at its end is in slot `state_slot`. Nodes already present are only marked as used.
  Status insert(const PrefixKey& key, std::span<const int32_t> tokens, std::span<const int32_t> table,
                int32_t state_slot);
  // Evicts the least recently used leaf; false when the cache is empty.
  bool evict_one();
  void clear();

  bool enabled() const { return config_.enabled; }
  int64_t hits() const { return hits_; }
  int64_t misses() const { return misses_; }
  int64_t held_blocks() const { return static_cast<int64_t>(nodes_.size()); }
  int64_t held_snapshots() const { return snapshots_; }
  int64_t held_bytes() const { return held_blocks() * block_bytes_ + snapshots_ * slots_.slot_bytes(); }

 private:
  struct Node {
    uint64_t parent = 0;
    std::vector<int32_t> tokens;  // this block's tokens, compared on lookup (hashes can collide)
    int32_t block = -1;
    int32_t snapshot = -1;
    int32_t children = 0;
    uint64_t last_use = 0;
  };
  static uint64_t root_hash(const PrefixKey& key);
  static uint64_t child_hash(uint64_t parent, std::span<const int32_t> tokens);
  // The node for `tokens` under `parent`, or null.
  Node* find(uint64_t hash, uint64_t parent, std::span<const int32_t> tokens);
  void drop(std::unordered_map<uint64_t, Node>::iterator it);
  void enforce_budgets();

  PrefixCacheConfig config_;
  BlockManager& blocks_;
  GdnStateSlots& slots_;
  int64_t block_bytes_;
  std::unordered_map<uint64_t, Node> nodes_;
  uint64_t clock_ = 0;
  int64_t hits_ = 0, misses_ = 0, snapshots_ = 0;
};

}  // namespace kiln
