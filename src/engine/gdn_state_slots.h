// GdnStateSlots: who holds which GDN state slot. A running sequence holds one, zeroed when it is
// acquired; the prefix cache holds snapshots (copies of a sequence's slot taken at a block
// boundary) in slots of the same pool, restored into a new sequence's slot on a hit.
#pragma once

#include <cstdint>

#include "model/state.h"

namespace kiln {

class GdnStateSlots {
 public:
  explicit GdnStateSlots(ModelState& state) : state_(state) {}

  // A zeroed slot for `seq` (which holds none).
  Status acquire(SequenceState& seq);
  // A slot for `seq` holding a copy of `snapshot`.
  Status restore(int32_t snapshot, SequenceState& seq);
  // A new slot holding a copy of slot `from` (the prefix cache's snapshot).
  Result<int32_t> snapshot(int32_t from);
  void release(int32_t slot) { state_.slots().release(slot); }
  void free(SequenceState& seq) { state_.release_slot(seq); }

  int64_t free_slots() const { return state_.free_slots(); }
  int64_t capacity() const { return state_.slots().capacity(); }
  int64_t slot_bytes() const { return state_.slot_bytes(); }

 private:
  ModelState& state_;
};

}  // namespace kiln
