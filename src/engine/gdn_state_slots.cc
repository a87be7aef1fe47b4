#include "engine/gdn_state_slots.h"

namespace kiln {

Status GdnStateSlots::acquire(SequenceState& seq) {
  KILN_ASSIGN_OR_RETURN(seq.slot, state_.acquire_slot());
  return {};
}

Result<int32_t> GdnStateSlots::snapshot(int32_t from) {
  // No zeroing: the copy overwrites every byte of the slot.
  KILN_ASSIGN_OR_RETURN(int32_t slot, state_.slots().acquire());
  Status st = state_.copy_slot(from, slot);
  if (!st.ok()) {
    release(slot);
    return st;
  }
  return slot;
}

Status GdnStateSlots::restore(int32_t snapshot_slot, SequenceState& seq) {
  KILN_ASSIGN_OR_RETURN(seq.slot, snapshot(snapshot_slot));
  return {};
}

}  // namespace kiln
