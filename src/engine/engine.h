// Engine: the batching actor's cycle. Each step() cancels what clients gave up, asks the
// Scheduler for the cycle's work, runs it as at most two batched forwards (decode rows, then
// prefill chunks), samples, streams tokens into each request's TokenChannel, and returns the
// blocks and slots of finished requests once the cycle's device work has settled.
// submit() is thread-safe; step() belongs to one thread (EngineActor, or a test).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "engine/adapter_registry.h"
#include "engine/prefix_cache.h"
#include "engine/scheduler.h"
#include "model/decode_replay.h"
#include "model/qwen35.h"

namespace kiln {

struct EngineConfig {
  SchedulerConfig scheduler;
  int64_t kv_blocks = 256;       // 64-token K/V blocks
  int64_t snapshot_slots = 16;   // GDN slots beyond max_running, for prefix-cache snapshots
  PrefixCacheConfig prefix_cache;
  size_t channel_capacity = 256;  // events buffered per request before its decoding pauses
  std::string model_identity;     // the prefix-cache key's model part
  AdapterRegistry* adapters = nullptr;  // resolves requests' adapters; null: any adapter is kNotFound
  // Greedy rows that report nothing else take their token from one argmax on the device, and only
  // ids cross to the host (row_sampling.h); false copies every row's logits to the host.
  bool device_sampling = true;
  // Decode steps are recorded once per shape bucket (and adapter composition) and replayed where
  // the backend can (CUDA graphs; model/decode_replay.h); false runs every step eagerly.
  bool decode_replay = true;
};

struct EngineStats {
  int64_t free_blocks = 0, total_blocks = 0, free_slots = 0, total_slots = 0;
  int64_t running = 0, waiting = 0;
  int64_t cached_blocks = 0, cached_snapshots = 0, prefix_hits = 0, prefix_misses = 0;
  // Since start: cycles that ran a forward, decode rows over them (mean batch occupancy =
  // decode_rows / decode_cycles), prompt tokens prefilled.
  int64_t decode_cycles = 0, decode_rows = 0, prefill_tokens = 0;
  int64_t max_running = 0;
  // Decode steps replayed, and shape buckets recorded (0 where the backend runs eagerly); of the
  // recordings, those for an adapter composition, and those dropped since (their adapters gone).
  int64_t decode_replays = 0, decode_recordings = 0;
  int64_t decode_adapter_recordings = 0, decode_recordings_invalidated = 0;
  // Recordings that failed (each cost one step run eagerly; the composition records again later).
  int64_t decode_record_failures = 0;
  // Device bytes of one GDN state slot (every GDN layer's recurrent and conv state), and the
  // slots taken and given back since start (engine/gdn_state_slots.h).
  int64_t slot_bytes = 0;
  GdnSlotCounters slot_counters;
};

struct CycleReport {
  int64_t decode_rows = 0, prefill_rows = 0, tokens = 0, finished = 0;
};

// One adapter of the stack a request resolved at submit: every token of the request is computed
// with exactly these weights, whatever loads or becomes the default afterwards.
struct ResolvedAdapter {
  std::string name;
  uint64_t revision = 0;
  float weight = 1.f;
};

struct Submission {
  uint64_t id = 0;
  std::shared_ptr<TokenChannel> channel;
  std::vector<ResolvedAdapter> adapters;  // in the order applied; empty: the base model
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(Qwen35Model& model, EngineConfig config);
  Engine(Qwen35Model& model, EngineConfig config, ModelState state);
  // Requests still queued or running get a kCancelled event ("engine stopped").
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request. kInvalidArgument names the bad field; kNotFound an unknown
  // adapter; kResourceExhausted a full queue.
  Result<Submission> submit(RequestSpec spec);
  // One cycle. An error of a forward finishes that forward's requests with kError and is
  // returned; the engine stays usable.
  Result<CycleReport> step();
  bool has_work() const { return !scheduler_.running().empty() || scheduler_.waiting() > 0; }
  EngineStats stats() const;

 private:
  // Appends a sampled token, decides whether it finishes the request, and streams it.
  void emit(Sequence& seq, const SampledToken& t);
  void fail(Sequence& seq, const Status& st);
  Status run_decode(const Cycle& c);
  Status run_prefill(const Cycle& c);
  // Returns finished requests' blocks and slots; pushes the finishing event where none was.
  int64_t retire_finished();

  Qwen35Model& model_;
  EngineConfig config_;
  ModelState state_;
  BlockManager blocks_;
  GdnStateSlots slots_;
  PrefixCache cache_;
  Scheduler scheduler_;
  std::unique_ptr<DecodeReplay> replay_;  // null: every decode step runs eagerly
  std::atomic<uint64_t> next_id_{1};
  int64_t decode_cycles_ = 0, decode_rows_ = 0, prefill_tokens_ = 0;
};

}  // namespace kiln
