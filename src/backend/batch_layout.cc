#include "backend/batch_layout.h"

#include <algorithm>

#include "backend/facets.h"

namespace kiln {

void HostBatchLayout::add_row(int64_t past, int64_t n, const std::vector<int32_t>& blocks, int32_t state_slot) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = past + i;
    positions.push_back(static_cast<int32_t>(pos));
    slot_mapping.push_back(blocks[pos / block_size] * block_size + static_cast<int32_t>(pos % block_size));
  }
  cu_seqlens.push_back(cu_seqlens.back() + static_cast<int32_t>(n));
  kv_lens.push_back(static_cast<int32_t>(past + n));
  state_slots.push_back(state_slot);
  block_tables.push_back(blocks);
}

Result<BatchLayout> make_batch_layout(const HostBatchLayout& h, StorageFacet& s) {
  const int64_t R = static_cast<int64_t>(h.kv_lens.size()), T = static_cast<int64_t>(h.positions.size());
  if (R == 0) return invalid_argument("batch layout: no rows");
  if (static_cast<int64_t>(h.cu_seqlens.size()) != R + 1 || static_cast<int64_t>(h.state_slots.size()) != R ||
      static_cast<int64_t>(h.block_tables.size()) != R || static_cast<int64_t>(h.slot_mapping.size()) != T)
    return invalid_argument("batch layout: row and token lists disagree in length");
  BatchLayout bl;
  bl.rows = R;
  bl.tokens = T;
  bl.block_size = h.block_size;
  bool all_single = true;
  for (int64_t r = 0; r < R; ++r) {
    const int64_t n = h.cu_seqlens[r + 1] - h.cu_seqlens[r];
    if (n <= 0) return invalid_argument("batch layout: row " + std::to_string(r) + " has no tokens");
    if (static_cast<int64_t>(h.block_tables[r].size()) * h.block_size < h.kv_lens[r])
      return invalid_argument("batch layout: row " + std::to_string(r) + " has too few K/V blocks");
    all_single &= n == 1;
    bl.max_q_len = std::max(bl.max_q_len, n);
    bl.max_kv_len = std::max<int64_t>(bl.max_kv_len, h.kv_lens[r]);
    bl.max_blocks = std::max<int64_t>(bl.max_blocks, static_cast<int64_t>(h.block_tables[r].size()));
  }
  bl.phase = all_single ? Phase::kDecode : Phase::kPrefill;
  std::vector<int32_t> tables(static_cast<size_t>(R * std::max<int64_t>(bl.max_blocks, 1)), 0);
  for (int64_t r = 0; r < R; ++r)
    std::copy(h.block_tables[r].begin(), h.block_tables[r].end(), tables.begin() + r * bl.max_blocks);
  KILN_ASSIGN_OR_RETURN(bl.positions, s.upload(Tensor::from_values(h.positions, {T})));
  KILN_ASSIGN_OR_RETURN(bl.cu_seqlens, s.upload(Tensor::from_values(h.cu_seqlens, {R + 1})));
  bl.host_cu_seqlens = h.cu_seqlens;
  KILN_ASSIGN_OR_RETURN(bl.kv_lens, s.upload(Tensor::from_values(h.kv_lens, {R})));
  KILN_ASSIGN_OR_RETURN(bl.block_tables, s.upload(Tensor::from_values(tables, {R, std::max<int64_t>(bl.max_blocks, 1)})));
  KILN_ASSIGN_OR_RETURN(bl.slot_mapping, s.upload(Tensor::from_values(h.slot_mapping, {T})));
  KILN_ASSIGN_OR_RETURN(bl.state_slots, s.upload(Tensor::from_values(h.state_slots, {R})));
  return bl;
}

}  // namespace kiln
