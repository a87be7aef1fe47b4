#include "model/state.h"

namespace kiln {

Result<ModelState> ModelState::create(const ModelConfig& c, StorageFacet& storage, StateCapacity cap) {
  if (cap.max_sequences <= 0 || cap.kv_blocks <= 0) return invalid_argument("state capacity must be positive");
  ModelState s;
  s.storage_ = &storage;
  const auto L = static_cast<size_t>(c.num_layers);
  s.k_cache_.resize(L);
  s.v_cache_.resize(L);
  s.recurrent_.resize(L);
  s.conv_.resize(L);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (c.layer_types[i] == LayerKind::kFullAttention) {
      Shape kv{cap.kv_blocks, kBlockSize, c.num_kv_heads, c.head_dim};
      KILN_ASSIGN_OR_RETURN(s.k_cache_[i], storage.allocate(kv, DType::kF32));
      KILN_ASSIGN_OR_RETURN(s.v_cache_[i], storage.allocate(kv, DType::kF32));
    } else {
      KILN_ASSIGN_OR_RETURN(s.recurrent_[i], storage.allocate({cap.max_sequences, c.linear_num_value_heads,
                                                               c.linear_key_head_dim, c.linear_value_head_dim},
                                                              DType::kF32));
      KILN_ASSIGN_OR_RETURN(s.conv_[i], storage.allocate({cap.max_sequences, c.linear_conv_kernel_dim - 1,
                                                          c.gdn_conv_dim()},
                                                         DType::kF32));
    }
  }
  for (int64_t b = cap.kv_blocks - 1; b >= 0; --b) s.free_blocks_.push_back(static_cast<int32_t>(b));
  for (int64_t q = cap.max_sequences - 1; q >= 0; --q) s.free_slots_.push_back(static_cast<int32_t>(q));
  return s;
}

Result<SequenceState> ModelState::new_sequence() {
  if (free_slots_.empty()) return resource_exhausted("no free GDN state slot (all sequences in use)");
  SequenceState seq;
  seq.slot = free_slots_.back();
  free_slots_.pop_back();
  for (size_t i = 0; i < recurrent_.size(); ++i) {
    if (!recurrent_[i].defined()) continue;
    KILN_RETURN_IF_ERROR(storage_->zero(recurrent_[i].select(0, seq.slot)));
    KILN_RETURN_IF_ERROR(storage_->zero(conv_[i].select(0, seq.slot)));
  }
  return seq;
}

Status ModelState::reserve(SequenceState& seq, int64_t tokens) {
  const int64_t need = (seq.length + tokens + kBlockSize - 1) / kBlockSize;
  const int64_t more = need - static_cast<int64_t>(seq.blocks.size());
  if (more > static_cast<int64_t>(free_blocks_.size()))
    return resource_exhausted("K/V cache full: " + std::to_string(more) + " more blocks needed, " +
                              std::to_string(free_blocks_.size()) + " free");
  for (int64_t i = 0; i < more; ++i) {
    seq.blocks.push_back(free_blocks_.back());
    free_blocks_.pop_back();
  }
  return {};
}

void ModelState::release(SequenceState& seq) {
  for (int32_t b : seq.blocks) free_blocks_.push_back(b);
  seq.blocks.clear();
  if (seq.slot >= 0) free_slots_.push_back(seq.slot);
  seq.slot = -1;
  seq.length = 0;
}

}  // namespace kiln
