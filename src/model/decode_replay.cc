#include "model/decode_replay.h"

#include <algorithm>

namespace kiln {

namespace {

// Offsets (i32 elements) of the packed inputs for at most `m` rows: ids, positions, cu_seqlens
// (m + 1), kv_lens, slot_mapping, state_slots, then the block table of the bucket.
struct Packed {
  int64_t m;
  int64_t ids() const { return 0; }
  int64_t positions() const { return m; }
  int64_t cu_seqlens() const { return 2 * m; }
  int64_t kv_lens() const { return 3 * m + 1; }
  int64_t slot_mapping() const { return 4 * m + 1; }
  int64_t state_slots() const { return 5 * m + 1; }
  int64_t tables() const { return 6 * m + 1; }
};

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

Result<std::unique_ptr<DecodeReplay>> DecodeReplay::create(Qwen35Model& model, ModelState& state, ReplayFacet& replay,
                                                           int64_t max_rows, int64_t max_blocks) {
  if (max_rows < 1 || max_blocks < 1)
    return invalid_argument("decode replay: max_rows " + std::to_string(max_rows) + " and max_blocks " +
                            std::to_string(max_blocks) + " must be positive");
  std::unique_ptr<DecodeReplay> d(new DecodeReplay(model, state, replay, max_rows, max_blocks));
  KILN_ASSIGN_OR_RETURN(d->padding_, state.new_sequence());
  KILN_RETURN_IF_ERROR(state.reserve(d->padding_, 1).with_context("decode replay: the padding rows' K/V block"));
  StorageFacet& s = model.backend().storage();
  const Packed p{max_rows};
  KILN_ASSIGN_OR_RETURN(d->inputs_, s.allocate({p.tables() + max_rows * max_blocks}, DType::kI32));
  KILN_ASSIGN_OR_RETURN(d->logits_, s.allocate({max_rows, model.config().vocab_size}, DType::kF32));
  return d;
}

DecodeReplay::DecodeReplay(Qwen35Model& model, ModelState& state, ReplayFacet& replay, int64_t max_rows,
                           int64_t max_blocks)
    : model_(model), state_(state), replay_(replay), max_rows_(max_rows), max_blocks_(max_blocks) {}

DecodeReplay::~DecodeReplay() {
  recordings_.clear();
  if (padding_.slot >= 0 || !padding_.blocks.empty()) state_.release(padding_);
}

int64_t DecodeReplay::row_bucket(int64_t rows) const {
  const int64_t b = rows <= 8 ? pow2_at_least(rows) : (rows + 7) / 8 * 8;
  return std::min(b, max_rows_);
}

int64_t DecodeReplay::block_bucket(int64_t blocks) const {
  return std::min(std::max<int64_t>(16, pow2_at_least(blocks)), max_blocks_);
}

bool DecodeReplay::applies(std::span<const SequenceInput> rows) const {
  if (rows.empty() || static_cast<int64_t>(rows.size()) > max_rows_) return false;
  for (const SequenceInput& r : rows) {
    if (r.tokens.size() != 1 || r.seq == nullptr || r.seq->slot < 0) return false;
    if ((r.seq->length + ModelState::kBlockSize) / ModelState::kBlockSize > max_blocks_) return false;
    for (const LoraTerm& t : r.lora)
      if (t.adapter == nullptr || t.adapter->weak_from_this().expired()) return false;
  }
  return true;
}

DecodeReplay::Stacks DecodeReplay::stacks_of(std::span<const SequenceInput> rows, int64_t bucket) {
  bool any = false, uniform = true;
  for (const SequenceInput& r : rows) {
    any |= !r.lora.empty();
    uniform &= std::equal(r.lora.begin(), r.lora.end(), rows[0].lora.begin(), rows[0].lora.end());
  }
  if (!any) return {};
  Stacks stacks(static_cast<size_t>(bucket));
  for (size_t i = 0; i < stacks.size(); ++i) {
    const std::span<const LoraTerm> src = i < rows.size() ? rows[i].lora : uniform ? rows[0].lora : std::span<const LoraTerm>();
    stacks[i].assign(src.begin(), src.end());
  }
  return stacks;
}

size_t DecodeReplay::adapter_recordings_held() const {
  size_t n = 0;
  for (const auto& [key, e] : recordings_) n += !e.held.empty();
  return n;
}

void DecodeReplay::invalidate_adapter_recordings() {
  // An adapter whose every holder is an entry of ours: nothing can ask for it again.
  std::map<const LoraAdapter*, std::pair<long, long>> holds;  // (ours, everyone's)
  for (const auto& [key, e] : recordings_)
    for (const auto& a : e.held) {
      auto& h = holds[a.get()];
      ++h.first;
      h.second = a.use_count();
    }
  for (auto it = recordings_.begin(); it != recordings_.end();) {
    const auto& held = it->second.held;
    if (std::any_of(held.begin(), held.end(), [&](const auto& a) {
          const auto& h = holds.at(a.get());
          return h.first == h.second;
        })) {
      stats_.invalidated += it->second.recording != nullptr;
      it = recordings_.erase(it);
    } else {
      ++it;
    }
  }
}

BatchLayout DecodeReplay::layout(int64_t rows, int64_t width) const {
  const Packed p{max_rows_};
  auto at = [&](int64_t offset, int64_t n) { return inputs_.slice(0, offset, offset + n); };
  BatchLayout bl;
  bl.phase = Phase::kDecode;
  bl.rows = bl.tokens = rows;
  bl.max_q_len = 1;
  bl.max_kv_len = width * ModelState::kBlockSize;  // the attention plans for every length the width holds
  bl.max_blocks = width;
  bl.block_size = ModelState::kBlockSize;
  bl.positions = at(p.positions(), rows);
  bl.cu_seqlens = at(p.cu_seqlens(), rows + 1);
  bl.kv_lens = at(p.kv_lens(), rows);
  bl.slot_mapping = at(p.slot_mapping(), rows);
  bl.state_slots = at(p.state_slots(), rows);
  bl.block_tables = at(p.tables(), rows * width).reshape({rows, width});
  return bl;
}

Status DecodeReplay::upload(std::span<const SequenceInput> rows, int64_t bucket, int64_t width) {
  const Packed p{max_rows_};
  const int32_t B = ModelState::kBlockSize;
  host_.assign(static_cast<size_t>(p.tables() + bucket * width), 0);
  int32_t* h = host_.data();
  for (int64_t r = 0; r < bucket; ++r) {
    h[p.cu_seqlens() + r] = static_cast<int32_t>(r);
    const bool real = r < static_cast<int64_t>(rows.size());
    const SequenceState& seq = real ? *rows[r].seq : padding_;
    const int32_t pos = real ? static_cast<int32_t>(seq.length) : 0;
    h[p.ids() + r] = real ? rows[r].tokens[0] : 0;
    h[p.positions() + r] = pos;
    h[p.kv_lens() + r] = pos + 1;
    h[p.slot_mapping() + r] = seq.blocks[pos / B] * B + pos % B;
    h[p.state_slots() + r] = seq.slot;
    std::copy(seq.blocks.begin(), seq.blocks.end(), h + p.tables() + r * width);
  }
  h[p.cu_seqlens() + bucket] = static_cast<int32_t>(bucket);
  const int64_t n = static_cast<int64_t>(host_.size());
  return model_.backend().storage().copy_from_host(Tensor::from_values(host_, {n}), inputs_.slice(0, 0, n));
}

void DecodeReplay::evict_beyond_limit() {
  while (adapter_recordings_held() > kMaxAdapterRecordings) {
    auto oldest = recordings_.end();
    for (auto it = recordings_.begin(); it != recordings_.end(); ++it)
      if (!it->second.held.empty() && (oldest == recordings_.end() || it->second.last_use < oldest->second.last_use))
        oldest = it;
    stats_.invalidated += oldest->second.recording != nullptr;
    recordings_.erase(oldest);
  }
}

Status DecodeReplay::step(int64_t bucket, int64_t width, const Stacks& stacks) {
  const BatchLayout bl = layout(bucket, width);
  const Tensor ids = inputs_.slice(0, 0, bucket), logits = logits_.slice(0, 0, bucket);
  const std::vector<std::span<const LoraTerm>> lora(stacks.begin(), stacks.end());
  return model_.decode_step(ids, bl, state_, logits, lora);
}

Result<Tensor> DecodeReplay::forward(std::span<const SequenceInput> rows) {
  if (!applies(rows))
    return invalid_argument("decode replay: the batch is not one token a row within " + std::to_string(max_rows_) +
                            " rows and " + std::to_string(max_blocks_) +
                            " blocks, its adapters held by shared pointers");
  int64_t blocks = 1;
  for (const SequenceInput& r : rows) {
    KILN_RETURN_IF_ERROR(state_.reserve(*r.seq, 1));
    blocks = std::max<int64_t>(blocks, static_cast<int64_t>(r.seq->blocks.size()));
  }
  const int64_t bucket = row_bucket(static_cast<int64_t>(rows.size())), width = block_bucket(blocks);
  Stacks stacks = stacks_of(rows, bucket);
  const bool adapted = !stacks.empty();
  if (adapted) invalidate_adapter_recordings();
  Key key{bucket, width, stacks};
  auto it = recordings_.find(key);
  const bool recorded = it != recordings_.end() && it->second.recording != nullptr;
  if (it != recordings_.end() && !recorded && it->second.failures >= kMaxRecordFailures)
    return model_.forward_on_device(rows, LogitsMode::kLast, state_);  // given up: this composition runs eagerly
  // A composition's first step runs as the eager twin; it is recorded if the next step repeats it.
  const bool first_sight = !eager_ && it == recordings_.end() && adapted && seen_once_ != key;
  if (first_sight) seen_once_ = key;
  if (!eager_ && !first_sight && !recorded) {
    // One eager step of padding rows alone first (they touch only their own block and slot):
    // it creates what first use creates (GEMM plans, handles, lazily loaded kernels) outside
    // the recording.
    KILN_RETURN_IF_ERROR(upload({}, bucket, width));
    KILN_RETURN_IF_ERROR(step(bucket, width, stacks));
    auto rec = replay_.record([this, bucket, width, stacks] { return step(bucket, width, stacks); });
    if (it == recordings_.end()) {
      // The entry holds its adapters from the first attempt: a failed one too, so that no other
      // adapter at a freed one's address inherits its failures.
      Entry e;
      for (const std::vector<LoraTerm>& stack : stacks)
        for (const LoraTerm& t : stack)
          if (std::none_of(e.held.begin(), e.held.end(), [&](const auto& h) { return h.get() == t.adapter; }))
            e.held.push_back(t.adapter->shared_from_this());
      it = recordings_.emplace(key, std::move(e)).first;
    }
    it->second.last_use = ++uses_;
    if (!rec.ok()) {
      // Nothing of the batch has run: it goes the eager way, and a later step of the composition
      // records again, up to kMaxRecordFailures failures in a row.
      ++it->second.failures;
      ++stats_.record_failures;
      last_failure_ = rec.status();
      if (adapted) evict_beyond_limit();
      return model_.forward_on_device(rows, LogitsMode::kLast, state_);
    }
    it->second.recording = std::move(rec).value();
    it->second.failures = 0;
    ++stats_.recordings;
    stats_.adapter_recordings += adapted;
    if (adapted) evict_beyond_limit();
  }
  KILN_RETURN_IF_ERROR(upload(rows, bucket, width));
  if (eager_ || first_sight) {
    KILN_RETURN_IF_ERROR(step(bucket, width, stacks));
    ++stats_.eager;
  } else {
    it->second.last_use = ++uses_;
    KILN_RETURN_IF_ERROR(replay_.replay(*it->second.recording));
    ++stats_.replays;
  }
  for (const SequenceInput& r : rows) r.seq->length += 1;
  return logits_.slice(0, 0, static_cast<int64_t>(rows.size()));
}

}  // namespace kiln
