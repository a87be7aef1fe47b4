// How the tokens of one forward divide into sequences, and where each sequence's state lives.
// Built on the host by the model runner, mirrored to the device by the storage facet.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/requests.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln {

struct BatchLayout {
  Phase phase = Phase::kPrefill;  // kDecode when every row contributes exactly one token
  int64_t rows = 0, tokens = 0;
  int64_t max_q_len = 0, max_kv_len = 0, max_blocks = 0;
  int block_size = 64;
  // All i32, on the backend's device.
  Tensor positions;     // [tokens] absolute position of each token in its sequence
  Tensor cu_seqlens;    // [rows + 1] row r owns tokens [cu_seqlens[r], cu_seqlens[r + 1])
  Tensor kv_lens;       // [rows] K/V history of each row after this step (new tokens included)
  Tensor block_tables;  // [rows, max_blocks] physical K/V block of each logical block
  Tensor slot_mapping;  // [tokens] cache slot (block * block_size + offset) of each new token
  Tensor state_slots;   // [rows] GDN state slot of each row
  // cu_seqlens on the host as well, for host-side planning without reading the device back
  // (make_batch_layout fills it; empty in a layout made otherwise, such as a replayed step's).
  std::vector<int32_t> host_cu_seqlens;
};

// The host-side description the model runner fills before it becomes tensors.
struct HostBatchLayout {
  int block_size = 64;
  std::vector<int32_t> positions, cu_seqlens{0}, kv_lens, slot_mapping, state_slots;
  std::vector<std::vector<int32_t>> block_tables;

  // Appends a row of `n` new tokens continuing a sequence of `past` tokens whose K/V blocks are
  // `blocks` (enough for past + n) and whose GDN state is in `state_slot`.
  void add_row(int64_t past, int64_t n, const std::vector<int32_t>& blocks, int32_t state_slot);
};

class StorageFacet;
// Validates the host description and places it on the backend's device.
Result<BatchLayout> make_batch_layout(const HostBatchLayout& h, StorageFacet& storage);

}  // namespace kiln
