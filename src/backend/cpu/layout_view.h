// Host-side reads of a BatchLayout's index tensors, with the checks every stateful kernel needs.
#pragma once

#include <algorithm>
#include <string>

#include "backend/batch_layout.h"
#include "core/status.h"

namespace kiln::cpu {

struct LayoutView {
  const BatchLayout* l = nullptr;
  const int32_t* cu = nullptr;
  const int32_t* kv_lens = nullptr;
  const int32_t* tables = nullptr;
  const int32_t* slots = nullptr;
  const int32_t* positions = nullptr;

  static Result<LayoutView> of(const BatchLayout* layout, int64_t tokens, const std::string& req) {
    if (layout == nullptr) return invalid_argument(req + ": no batch layout");
    if (layout->cu_seqlens.numel() != layout->rows + 1)
      return invalid_argument(req + ": cu_seqlens must have rows + 1 entries");
    LayoutView v;
    v.l = layout;
    v.cu = layout->cu_seqlens.data<int32_t>();
    if (v.cu[layout->rows] != tokens)
      return invalid_argument(req + ": the layout covers " + std::to_string(v.cu[layout->rows]) +
                              " tokens, the tensors " + std::to_string(tokens));
    if (layout->kv_lens.defined()) v.kv_lens = layout->kv_lens.data<int32_t>();
    if (layout->block_tables.defined()) v.tables = layout->block_tables.data<int32_t>();
    if (layout->state_slots.defined()) v.slots = layout->state_slots.data<int32_t>();
    if (layout->positions.defined()) v.positions = layout->positions.data<int32_t>();
    return v;
  }
  int64_t row_begin(int64_t r) const { return cu[r]; }
  int64_t row_len(int64_t r) const { return cu[r + 1] - cu[r]; }
  int64_t row_of_token(int64_t t) const {
    return std::upper_bound(cu, cu + l->rows + 1, static_cast<int32_t>(t)) - cu - 1;
  }
  // The cache slot of logical position `pos` of row r.
  int64_t kv_slot(int64_t r, int64_t pos) const {
    return static_cast<int64_t>(tables[r * l->max_blocks + pos / l->block_size]) * l->block_size + pos % l->block_size;
  }
};

}  // namespace kiln::cpu
