#include "engine/block_manager.h"

#include <algorithm>

namespace kiln {

int64_t BlockManager::blocks_needed(const SequenceState& seq, int64_t tokens) const {
  return std::max<int64_t>(0, blocks_for(seq.length + tokens) - static_cast<int64_t>(seq.blocks.size()));
}

void BlockManager::adopt_prefix(SequenceState& seq, std::span<const int32_t> blocks) {
  for (int32_t b : blocks) {
    retain(b);
    seq.blocks.push_back(b);
  }
  seq.length = static_cast<int64_t>(blocks.size()) * ModelState::kBlockSize;
}

}  // namespace kiln
