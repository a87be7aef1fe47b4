// GdnStateSlots: who holds which GDN state slot. A running sequence holds one, zeroed when it is
// acquired; the prefix cache holds snapshots (copies of a sequence's slot taken at a block
// boundary) in slots of the same pool, restored into a new sequence's slot on a hit. Every slot
// taken and given back is counted (GdnSlotCounters), so that the pool's accounting can be closed.
#pragma once

#include <cstdint>

#include "model/state.h"

namespace kiln {

// Since the pool was made. A slot taken for a sequence (acquisitions, restores) comes back as a
// sequence release; a snapshot comes back as a cache release. So once no sequence runs,
// acquisitions + restores == sequence_releases, and snapshots == cache_releases + the snapshots
// the prefix cache still holds.
struct GdnSlotCounters {
  int64_t acquisitions = 0;       // zeroed slots for new sequences
  int64_t restores = 0;           // new sequences' slots filled from a prefix-cache snapshot
  int64_t snapshots = 0;          // snapshots taken for the prefix cache
  int64_t sequence_releases = 0;  // slots sequences gave back (finished, cancelled, not admitted)
  int64_t cache_releases = 0;     // snapshots the prefix cache gave back (evicted)
  int64_t failures = 0;           // an acquire, restore or snapshot that found no free slot or failed
};

class GdnStateSlots {
 public:
  explicit GdnStateSlots(ModelState& state) : state_(state) {}

  // A zeroed slot for `seq` (which holds none).
  Status acquire(SequenceState& seq);
  // A slot for `seq` holding a copy of `snapshot`.
  Status restore(int32_t snapshot, SequenceState& seq);
  // A new slot holding a copy of slot `from` (the prefix cache's snapshot).
  Result<int32_t> snapshot(int32_t from);
  // A snapshot given back by the prefix cache.
  void release(int32_t slot);
  // `seq`'s slot given back, where it holds one.
  void free(SequenceState& seq);

  int64_t free_slots() const { return state_.free_slots(); }
  int64_t capacity() const { return state_.slots().capacity(); }
  int64_t slot_bytes() const { return state_.slot_bytes(); }
  const GdnSlotCounters& counters() const { return counters_; }

 private:
  // A new slot holding a copy of slot `from`; counts nothing.
  Result<int32_t> copy_of(int32_t from);

  ModelState& state_;
  GdnSlotCounters counters_;
};

}  // namespace kiln
