// BlockManager: the engine's view of the paged K/V cache. Each sequence's block table lives in
// its SequenceState; the blocks come from ModelState's IdPool (the one allocator), with
// reference counts so that prefix-cache blocks are shared rather than copied.
#pragma once

#include <cstdint>
#include <span>

#include "model/state.h"

namespace kiln {

class BlockManager {
 public:
  explicit BlockManager(ModelState& state) : state_(state) {}

  static int64_t blocks_for(int64_t tokens) { return (tokens + ModelState::kBlockSize - 1) / ModelState::kBlockSize; }
  // Blocks `seq` still lacks to hold `tokens` more tokens.
  int64_t blocks_needed(const SequenceState& seq, int64_t tokens) const;
  // Appends the blocks that `seq` lacks for `tokens` more tokens, all or none.
  Status reserve(SequenceState& seq, int64_t tokens) { return state_.reserve(seq, tokens); }
  // Starts `seq` (which holds no blocks) on a cached prefix: shares `blocks`, each retained once,
  // and marks their tokens as processed.
  void adopt_prefix(SequenceState& seq, std::span<const int32_t> blocks);
  void retain(int32_t block) { state_.blocks().retain(block); }
  bool release(int32_t block) { return state_.blocks().release(block); }
  // Drops every block reference of `seq` (its GDN slot is GdnStateSlots' business).
  void free(SequenceState& seq) { state_.release_blocks(seq); }

  int32_t ref_count(int32_t block) const { return state_.blocks().ref_count(block); }
  int64_t free_blocks() const { return state_.free_blocks(); }
  int64_t capacity() const { return state_.blocks().capacity(); }

 private:
  ModelState& state_;
};

}  // namespace kiln
