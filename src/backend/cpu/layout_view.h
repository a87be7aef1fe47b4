// Host-side reads of a (validated) BatchLayout's index tensors.
#pragma once

#include <algorithm>
#include <string>

#include "backend/batch_layout.h"
#include "core/status.h"

namespace kiln::cpu {

struct LayoutView {
  const BatchLayout* l;
  const int32_t* cu;
  const int32_t* kv_lens;
  const int32_t* tables;
  const int32_t* slots;

  explicit LayoutView(const BatchLayout* layout)
      : l(layout),
        cu(layout->cu_seqlens.data<int32_t>()),
        kv_lens(layout->kv_lens.defined() ? layout->kv_lens.data<int32_t>() : nullptr),
        tables(layout->block_tables.defined() ? layout->block_tables.data<int32_t>() : nullptr),
        slots(layout->state_slots.defined() ? layout->state_slots.data<int32_t>() : nullptr) {}

  int64_t row_begin(int64_t r) const { return cu[r]; }
  int64_t row_len(int64_t r) const { return cu[r + 1] - cu[r]; }
  int64_t row_of_token(int64_t t) const {
    return std::upper_bound(cu, cu + l->rows + 1, static_cast<int32_t>(t)) - cu - 1;
  }
  // The cache slot of logical position `pos` of row r.
  int64_t kv_slot(int64_t r, int64_t pos) const {
    return static_cast<int64_t>(tables[r * l->max_blocks + pos / l->block_size]) * l->block_size + pos % l->block_size;
  }
  Status check_state_slots(int64_t pool_slots, const std::string& req) const {
    for (int64_t row = 0; row < l->rows; ++row)
      if (slots[row] < 0 || slots[row] >= pool_slots)
        return invalid_argument(req + ": state slot " + std::to_string(slots[row]) + " of row " + std::to_string(row) +
                                " is outside the pool of " + std::to_string(pool_slots));
    return {};
  }
};

}  // namespace kiln::cpu
