// Per-sequence state a forward continues from: paged K/V for full-attention layers and a GDN
// state slot (recurrent + conv) for linear-attention layers. ModelState owns the device pools
// and the two IdPools that say which blocks and slots are taken; every allocation (`kiln
// generate`, bench, tests, the engine's BlockManager and GdnStateSlots) goes through them.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/facets.h"
#include "model/config.h"
#include "model/id_pool.h"

namespace kiln {

struct SequenceState {
  int64_t length = 0;             // tokens already processed
  int32_t slot = -1;              // GDN state slot
  std::vector<int32_t> blocks;    // physical K/V block of each logical 64-token block
};

struct StateCapacity {
  int64_t max_sequences = 4;  // GDN state slots (the engine adds its prefix-cache snapshots here)
  int64_t kv_blocks = 64;     // 64-token blocks shared by all sequences
  DType kv_dtype = DType::kF32;  // K/V element: f32, bf16 or f8e4m3 (Qwen35Model::create_state sets it)
};

class ModelState {
 public:
  static constexpr int kBlockSize = 64;
  static Result<ModelState> create(const ModelConfig& c, StorageFacet& storage, StateCapacity cap);

  // A fresh sequence holding a zeroed GDN state slot.
  Result<SequenceState> new_sequence();
  // Makes room for `tokens` more tokens of `seq`: appends the K/V blocks it lacks, all or none.
  Status reserve(SequenceState& seq, int64_t tokens);
  // Drops the sequence's references to its blocks and slot (shared blocks stay with their
  // other holders) and resets it.
  void release(SequenceState& seq);
  void release_blocks(SequenceState& seq);  // the K/V half of release (blocks emptied)
  void release_slot(SequenceState& seq);    // the GDN half of release (slot = -1)

  // A GDN state slot, zeroed (every layer's recurrent and conv state).
  Result<int32_t> acquire_slot();
  // Copies every GDN layer's recurrent and conv state of slot `src` into slot `dst`.
  Status copy_slot(int32_t src, int32_t dst);
  // Slot `slot`'s state on the host as f32, layer by layer (recurrent, then conv): what a check
  // compares between two ways of reaching the same point of a sequence.
  Result<std::vector<float>> slot_to_host(int32_t slot) const;

  // Per layer index (only the matching kind is defined).
  const Tensor& k_cache(int64_t layer) const { return k_cache_[layer]; }  // [blocks, 64, Hkv, hd]
  const Tensor& v_cache(int64_t layer) const { return v_cache_[layer]; }
  const Tensor& recurrent(int64_t layer) const { return recurrent_[layer]; }  // [slots, Hv, dk, dv]
  const Tensor& conv(int64_t layer) const { return conv_[layer]; }            // [slots, K-1, C]

  IdPool& blocks() { return blocks_; }
  IdPool& slots() { return slots_; }
  const IdPool& blocks() const { return blocks_; }
  const IdPool& slots() const { return slots_; }
  int64_t free_blocks() const { return blocks_.free_count(); }
  int64_t free_slots() const { return slots_.free_count(); }
  // Device bytes of one K/V block over all attention layers, and of one GDN slot over all GDN
  // layers (the prefix cache's byte budget counts both).
  int64_t block_bytes() const { return block_bytes_; }
  int64_t slot_bytes() const { return slot_bytes_; }
  // The same, before any state exists (for sizing pools from a memory budget).
  static int64_t block_bytes_for(const ModelConfig& c, DType kv_dtype);
  static int64_t slot_bytes_for(const ModelConfig& c);

 private:
  StorageFacet* storage_ = nullptr;
  std::vector<Tensor> k_cache_, v_cache_, recurrent_, conv_;
  IdPool blocks_, slots_;
  int64_t block_bytes_ = 0, slot_bytes_ = 0;
};

}  // namespace kiln
