// Scheduler: decides each cycle's work within the token budget, in this order
// (docs/ARCHITECTURE.md, "The engine"): one decode token for every ready row, then prefill chunks
// of prompts in progress (rotating between requests), then admission of waiting requests whose
// first chunk fits. It owns the bounded waiting queue and the running set, and takes blocks and
// slots for what it schedules.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <vector>

#include "engine/gdn_state_slots.h"
#include "engine/prefix_cache.h"
#include "engine/sequence.h"

namespace kiln {

struct SchedulerConfig {
  int64_t max_batch_tokens = 512;  // tokens per cycle, decode and prefill together
  int64_t max_running = 16;        // sequences holding a GDN slot at once
  int64_t max_queue = 64;          // waiting requests; beyond it submit is refused
};

struct PrefillChunk {
  Sequence* seq;
  int64_t len;  // tokens of its prompt from seq->state.length on
};

struct Cycle {
  std::vector<Sequence*> decode;
  std::vector<PrefillChunk> prefill;
  int64_t tokens() const;
};

class Scheduler {
 public:
  Scheduler(SchedulerConfig config, BlockManager& blocks, GdnStateSlots& slots, PrefixCache& cache)
      : config_(config), blocks_(blocks), slots_(slots), cache_(cache) {}

  // Thread-safe. kResourceExhausted when the queue is full (the server's 503).
  Status enqueue(std::unique_ptr<Sequence> seq);
  // Takes the waiting requests whose clients cancelled (they hold nothing yet).
  std::vector<std::unique_ptr<Sequence>> take_cancelled_waiting();
  Cycle schedule();
  // Returns a running sequence's blocks and slot and forgets it.
  std::unique_ptr<Sequence> retire(Sequence* seq);
  // Retires every running sequence and empties the queue (the engine is going away).
  std::vector<std::unique_ptr<Sequence>> retire_all();

  const std::vector<std::unique_ptr<Sequence>>& running() const { return running_; }
  size_t waiting() const;

 private:
  // The next prefill chunk of `seq` within `budget`: cut at a block boundary when it does not
  // finish the prompt (so its end can be a prefix-cache snapshot), and at the prompt's last
  // block boundary, the snapshot a repeat of the prompt can resume from.
  int64_t chunk_len(const Sequence& seq, int64_t budget) const;
  // Free blocks not promised to running sequences.
  int64_t unpromised_blocks() const;
  // Admits the front waiting request if it fits; false otherwise.
  bool admit_front(int64_t budget, Cycle& cycle);

  SchedulerConfig config_;
  BlockManager& blocks_;
  GdnStateSlots& slots_;
  PrefixCache& cache_;
  mutable std::mutex queue_mu_;
  std::deque<std::unique_ptr<Sequence>> waiting_;
  std::vector<std::unique_ptr<Sequence>> running_;
  uint64_t turn_ = 0;  // rotates where each cycle's decode and prefill rows start
};

}  // namespace kiln
