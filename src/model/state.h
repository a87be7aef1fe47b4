// Per-sequence state a forward continues from: paged K/V for full-attention layers and a GDN
// state slot (recurrent + conv) for linear-attention layers. The pools live on the backend's
// device; this simple free-list allocator is what the engine's block manager will replace.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/facets.h"
#include "model/config.h"

namespace kiln {

struct SequenceState {
  int64_t length = 0;             // tokens already processed
  int32_t slot = -1;              // GDN state slot
  std::vector<int32_t> blocks;    // physical K/V block of each logical 64-token block
};

struct StateCapacity {
  int64_t max_sequences = 4;
  int64_t kv_blocks = 64;  // 64-token blocks shared by all sequences
};

class ModelState {
 public:
  static constexpr int kBlockSize = 64;
  static Result<ModelState> create(const ModelConfig& c, StorageFacet& storage, StateCapacity cap);

  // A fresh sequence with zeroed GDN state.
  Result<SequenceState> new_sequence();
  // Makes room for `tokens` more tokens of `seq` (allocating K/V blocks).
  Status reserve(SequenceState& seq, int64_t tokens);
  void release(SequenceState& seq);

  // Per layer index (only the matching kind is defined).
  const Tensor& k_cache(int64_t layer) const { return k_cache_[layer]; }  // [blocks, 64, Hkv, hd]
  const Tensor& v_cache(int64_t layer) const { return v_cache_[layer]; }
  const Tensor& recurrent(int64_t layer) const { return recurrent_[layer]; }  // [slots, Hv, dk, dv]
  const Tensor& conv(int64_t layer) const { return conv_[layer]; }            // [slots, K-1, C]
  int64_t free_blocks() const { return static_cast<int64_t>(free_blocks_.size()); }
  int64_t free_slots() const { return static_cast<int64_t>(free_slots_.size()); }

 private:
  StorageFacet* storage_ = nullptr;
  std::vector<Tensor> k_cache_, v_cache_, recurrent_, conv_;
  std::vector<int32_t> free_blocks_, free_slots_;
};

}  // namespace kiln
