// DecodeReplay: the decode step of a batch recorded once per shape bucket and replayed (CUDA
// graphs), so that a step costs one upload of its inputs and one launch instead of hundreds.
//
// A recording keeps device addresses, so everything a step reads lives in buffers made once
// here: the token ids and the batch layout (packed in one i32 buffer, refreshed by one copy per
// step) and the logits. Rows are padded up to a bucket (1, 2, 4, 8, then multiples of 8) and
// block tables to a power-of-two width (at least 16 blocks); a padding row decodes token 0 at
// position 0 into a K/V block and GDN slot of its own, which nothing else reads. The attention
// plans its key splits for the bucket's width (every length up to it), so a replay is exact for
// every step that fits its bucket; the eager twin (set_eager) runs the very same padded step
// without recording, which is what replays are checked against.
//
// Rows with adapters are taken where every adapter is held by a shared pointer: a recording is
// made per adapter composition (each padded row's stack; where all real rows share one stack the
// padding rows take it too, so the composition does not depend on the row count), at its second
// step in a row (a composition seen once runs the eager padded step, so churning batches do not
// pay for recordings they never replay). A recording holds the adapters it reads, so their memory
// and addresses stay theirs; it is dropped once nothing but recordings holds one of them (the
// adapter was unloaded or replaced and its last request finished: the adapter set changed), and
// the least recently used goes beyond kMaxAdapterRecordings.
//
// A recording that fails (the capture was invalidated, the graph could not be instantiated) costs
// only that step, which runs the plain forward; the composition records again at its next step,
// and only after kMaxRecordFailures failures in a row does it run the plain forward for good.
// Other compositions and buckets keep recording and replaying.
//
// Prefill chunks, batches over the limits and adapters not held by a shared pointer are not taken
// (applies() says so); the caller runs them through Qwen35Model::forward_on_device.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/replay.h"
#include "model/qwen35.h"

namespace kiln {

struct DecodeReplayStats {
  int64_t recordings = 0;          // (bucket, adapter composition) pairs recorded
  int64_t replays = 0;             // steps replayed
  int64_t eager = 0;               // steps run as the eager twin (set_eager, or a composition's first step)
  int64_t adapter_recordings = 0;  // of `recordings`, those with adapters
  int64_t invalidated = 0;         // adapter recordings dropped (their adapters gone, or evicted)
  int64_t record_failures = 0;     // recordings that failed (each such step ran the plain forward)
};

class DecodeReplay {
 public:
  // Takes one GDN slot and one K/V block of `state` for the padding rows (kResourceExhausted
  // when none is free). `max_rows` and `max_blocks` bound the buckets (rows of a batch, K/V
  // blocks of a row); `replay` records and replays (the model's backend's, or a test's).
  static Result<std::unique_ptr<DecodeReplay>> create(Qwen35Model& model, ModelState& state, ReplayFacet& replay,
                                                      int64_t max_rows, int64_t max_blocks);
  ~DecodeReplay();
  DecodeReplay(const DecodeReplay&) = delete;
  DecodeReplay& operator=(const DecodeReplay&) = delete;

  static constexpr size_t kMaxAdapterRecordings = 32;
  static constexpr int kMaxRecordFailures = 3;  // in a row, of one (bucket, composition)

  // Whether forward() takes `rows`: one token each, at most max_rows rows, each within max_blocks
  // blocks after this step, every adapter held by a shared pointer.
  bool applies(std::span<const SequenceInput> rows) const;
  // As model.forward_on_device(rows, kLast, state) for rows that apply(): every row's sequence
  // advances by its token, and the logits [rows, vocab] stay on the device (a view of a buffer
  // that the next step overwrites).
  Result<Tensor> forward(std::span<const SequenceInput> rows);

  // Runs the padded steps eagerly instead of recording and replaying them (the reference a
  // replay must equal bit for bit).
  void set_eager(bool eager) { eager_ = eager; }
  const DecodeReplayStats& stats() const { return stats_; }
  // Entries that hold adapters: recordings, and compositions whose recordings failed.
  size_t adapter_recordings_held() const;
  // Why the last failed recording failed, or OK when none has.
  const Status& last_failure() const { return last_failure_; }

  // The padded sizes of a batch: rows, and block-table width (blocks of its longest row).
  int64_t row_bucket(int64_t rows) const;
  int64_t block_bucket(int64_t blocks) const;

 private:
  DecodeReplay(Qwen35Model& model, ModelState& state, ReplayFacet& replay, int64_t max_rows, int64_t max_blocks);
  // The layout of a (rows, width) bucket as views of inputs_.
  BatchLayout layout(int64_t rows, int64_t width) const;
  // Each padded row's adapter stack (empty: the base model), as a recording is keyed by.
  using Stacks = std::vector<std::vector<LoraTerm>>;
  using Key = std::tuple<int64_t, int64_t, Stacks>;  // rows bucket, width bucket, stacks
  struct Entry {
    std::unique_ptr<Recording> recording;  // null while its recordings have failed
    std::vector<std::shared_ptr<const LoraAdapter>> held;  // the adapters it reads
    uint64_t last_use = 0;
    int failures = 0;  // failed recordings in a row
  };
  static Stacks stacks_of(std::span<const SequenceInput> rows, int64_t bucket);
  // Drops adapter recordings that hold an adapter nothing else holds.
  void invalidate_adapter_recordings();
  // Drops the least recently used adapter recordings beyond kMaxAdapterRecordings.
  void evict_beyond_limit();
  // Fills host_ for `rows` (padded to `bucket` rows, `width` blocks) and copies it to inputs_.
  Status upload(std::span<const SequenceInput> rows, int64_t bucket, int64_t width);
  Status step(int64_t bucket, int64_t width, const Stacks& stacks);

  Qwen35Model& model_;
  ModelState& state_;
  ReplayFacet& replay_;
  const int64_t max_rows_, max_blocks_;
  SequenceState padding_;      // the padding rows' block and slot
  Tensor inputs_;              // i32 [6 max_rows + 1 + max_rows max_blocks]: ids, layout
  Tensor logits_;              // f32 [max_rows, vocab]
  std::vector<int32_t> host_;  // the next upload
  std::map<Key, Entry> recordings_;
  std::optional<Key> seen_once_;  // the adapter composition of the last step, run eagerly
  uint64_t uses_ = 0;
  bool eager_ = false;
  Status last_failure_;
  DecodeReplayStats stats_;
};

}  // namespace kiln
