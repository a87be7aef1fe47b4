#include "engine/gdn_state_slots.h"

namespace kiln {

Status GdnStateSlots::acquire(SequenceState& seq) {
  auto slot = state_.acquire_slot();
  if (!slot.ok()) {
    ++counters_.failures;
    return slot.status();
  }
  seq.slot = *slot;
  ++counters_.acquisitions;
  return {};
}

Result<int32_t> GdnStateSlots::copy_of(int32_t from) {
  // No zeroing: the copy overwrites every byte of the slot.
  KILN_ASSIGN_OR_RETURN(int32_t slot, state_.slots().acquire());
  Status st = state_.copy_slot(from, slot);
  if (!st.ok()) {
    state_.slots().release(slot);
    return st;
  }
  return slot;
}

Result<int32_t> GdnStateSlots::snapshot(int32_t from) {
  auto slot = copy_of(from);
  ++(slot.ok() ? counters_.snapshots : counters_.failures);
  return slot;
}

Status GdnStateSlots::restore(int32_t snapshot_slot, SequenceState& seq) {
  auto slot = copy_of(snapshot_slot);
  if (!slot.ok()) {
    ++counters_.failures;
    return slot.status();
  }
  seq.slot = *slot;
  ++counters_.restores;
  return {};
}

void GdnStateSlots::release(int32_t slot) {
  state_.slots().release(slot);
  ++counters_.cache_releases;
}

void GdnStateSlots::free(SequenceState& seq) {
  if (seq.slot < 0) return;
  state_.release_slot(seq);
  ++counters_.sequence_releases;
}

}  // namespace kiln
