#include "model/state.h"

namespace kiln {

// GDN state is f32; K/V is f32, bf16 or f8e4m3 (StateCapacity::kv_dtype).
int64_t ModelState::block_bytes_for(const ModelConfig& c, DType kv_dtype) {
  return c.count(LayerKind::kFullAttention) * 2 * kBlockSize * c.num_kv_heads * c.head_dim *
         static_cast<int64_t>(dtype_size(kv_dtype));
}

int64_t ModelState::slot_bytes_for(const ModelConfig& c) {
  return c.count(LayerKind::kLinearAttention) *
         (c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim +
          (c.linear_conv_kernel_dim - 1) * c.gdn_conv_dim()) * 4;
}

Result<ModelState> ModelState::create(const ModelConfig& c, StorageFacet& storage, StateCapacity cap) {
  if (cap.max_sequences <= 0 || cap.kv_blocks <= 0) return invalid_argument("state capacity must be positive");
  if (cap.kv_dtype != DType::kF32 && cap.kv_dtype != DType::kBF16 && cap.kv_dtype != DType::kF8E4M3)
    return invalid_argument("K/V cache dtype " + std::string(dtype_name(cap.kv_dtype)) + ": f32, bf16 or f8e4m3 only");
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
      KILN_ASSIGN_OR_RETURN(s.k_cache_[i], storage.allocate(kv, cap.kv_dtype));
      KILN_ASSIGN_OR_RETURN(s.v_cache_[i], storage.allocate(kv, cap.kv_dtype));
    } else {
      KILN_ASSIGN_OR_RETURN(s.recurrent_[i], storage.allocate({cap.max_sequences, c.linear_num_value_heads,
                                                               c.linear_key_head_dim, c.linear_value_head_dim},
                                                              DType::kF32));
      KILN_ASSIGN_OR_RETURN(s.conv_[i], storage.allocate({cap.max_sequences, c.linear_conv_kernel_dim - 1,
                                                          c.gdn_conv_dim()},
                                                         DType::kF32));
    }
  }
  s.block_bytes_ = block_bytes_for(c, cap.kv_dtype);
  s.slot_bytes_ = slot_bytes_for(c);
  s.blocks_ = IdPool(cap.kv_blocks, "K/V block");
  s.slots_ = IdPool(cap.max_sequences, "GDN state slot");
  return s;
}

Result<int32_t> ModelState::acquire_slot() {
  KILN_ASSIGN_OR_RETURN(int32_t slot, slots_.acquire());
  for (size_t i = 0; i < recurrent_.size(); ++i) {
    if (!recurrent_[i].defined()) continue;
    Status st = storage_->zero(recurrent_[i].select(0, slot));
    if (st.ok()) st = storage_->zero(conv_[i].select(0, slot));
    if (!st.ok()) {
      slots_.release(slot);
      return st;
    }
  }
  return slot;
}

Status ModelState::copy_slot(int32_t src, int32_t dst) {
  for (size_t i = 0; i < recurrent_.size(); ++i) {
    if (!recurrent_[i].defined()) continue;
    KILN_RETURN_IF_ERROR(storage_->copy(recurrent_[i].select(0, src), recurrent_[i].select(0, dst)));
    KILN_RETURN_IF_ERROR(storage_->copy(conv_[i].select(0, src), conv_[i].select(0, dst)));
  }
  return {};
}

Result<std::vector<float>> ModelState::slot_to_host(int32_t slot) const {
  std::vector<float> out;
  for (size_t i = 0; i < recurrent_.size(); ++i) {
    if (!recurrent_[i].defined()) continue;
    for (const Tensor* t : {&recurrent_[i], &conv_[i]}) {
      const Tensor one = t->select(0, slot);
      Tensor host = Tensor::empty(one.shape(), DType::kF32);
      KILN_RETURN_IF_ERROR(storage_->copy_to_host(one, host));
      out.insert(out.end(), host.data<float>(), host.data<float>() + host.numel());
    }
  }
  return out;
}

Result<SequenceState> ModelState::new_sequence() {
  SequenceState seq;
  KILN_ASSIGN_OR_RETURN(seq.slot, acquire_slot());
  return seq;
}

Status ModelState::reserve(SequenceState& seq, int64_t tokens) {
  const int64_t need = (seq.length + tokens + kBlockSize - 1) / kBlockSize;
  const int64_t more = need - static_cast<int64_t>(seq.blocks.size());
  if (more <= 0) return {};
  auto got = blocks_.acquire(more);
  if (!got.ok()) return Status(got.status().code(), "K/V cache full: " + got.status().message());
  seq.blocks.insert(seq.blocks.end(), got->begin(), got->end());
  return {};
}

void ModelState::release_blocks(SequenceState& seq) {
  for (int32_t b : seq.blocks) blocks_.release(b);
  seq.blocks.clear();
}

void ModelState::release_slot(SequenceState& seq) {
  if (seq.slot >= 0) slots_.release(seq.slot);
  seq.slot = -1;
}

void ModelState::release(SequenceState& seq) {
  release_blocks(seq);
  release_slot(seq);
  seq.length = 0;
}

}  // namespace kiln
