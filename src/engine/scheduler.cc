#include "engine/scheduler.h"

#include <algorithm>

namespace kiln {

namespace {
constexpr int64_t kB = ModelState::kBlockSize;
}

int64_t Cycle::tokens() const {
  int64_t n = static_cast<int64_t>(decode.size());
  for (const auto& c : prefill) n += c.len;
  return n;
}

Status Scheduler::enqueue(std::unique_ptr<Sequence> seq) {
  std::lock_guard<std::mutex> lock(queue_mu_);
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_queue)
    return resource_exhausted("request queue full: " + std::to_string(waiting_.size()) + " requests waiting (max_queue " +
                              std::to_string(config_.max_queue) + ")");
  waiting_.push_back(std::move(seq));
  return {};
}

size_t Scheduler::waiting() const {
  std::lock_guard<std::mutex> lock(queue_mu_);
  return waiting_.size();
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_cancelled_waiting() {
  std::lock_guard<std::mutex> lock(queue_mu_);
  std::vector<std::unique_ptr<Sequence>> out;
  for (auto it = waiting_.begin(); it != waiting_.end();) {
    if ((*it)->channel->cancelled()) {
      out.push_back(std::move(*it));
      it = waiting_.erase(it);
    } else {
      ++it;
    }
  }
  return out;
}

int64_t Scheduler::chunk_len(const Sequence& seq, int64_t budget) const {
  const int64_t start = seq.state.length, remaining = seq.prompt_remaining();
  int64_t len = std::min(remaining, budget);
  if (len <= 0) return 0;
  const int64_t end = start + len;
  const int64_t last_boundary = (seq.prompt_len - 1) / kB * kB;
  if (cache_.enabled() && start < last_boundary && end > last_boundary) return last_boundary - start;
  if (len < remaining && end / kB * kB > start) return end / kB * kB - start;
  return len;
}

int64_t Scheduler::unpromised_blocks() const {
  int64_t promised = 0;
  for (const auto& s : running_)
    promised += std::max<int64_t>(0, s->max_blocks() - static_cast<int64_t>(s->state.blocks.size()));
  return blocks_.free_blocks() - promised;
}

bool Scheduler::admit_front(int64_t budget, Cycle& cycle) {
  Sequence* seq = nullptr;
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    if (waiting_.empty()) return false;
    seq = waiting_.front().get();  // only this thread removes from the front
  }
  if (static_cast<int64_t>(running_.size()) >= config_.max_running) return false;
  // Snapshots are the only slots that can be reclaimed; evict before the lookup so that the
  // snapshot a hit resumes from cannot be evicted under it.
  while (slots_.free_slots() == 0 && cache_.evict_one()) {
  }
  if (slots_.free_slots() == 0) return false;
  // At least one prompt token must run to give the first logits.
  // Scoring the prompt needs the logits of every prompt position: no hit then.
  PrefixHit hit = cache_.lookup(seq->key, seq->spec.prompt, seq->spec.prompt_logprobs >= 0 ? 0 : seq->prompt_len - 1);
  blocks_.adopt_prefix(seq->state, hit.blocks);
  Status st = hit.snapshot >= 0 ? slots_.restore(hit.snapshot, seq->state) : slots_.acquire(seq->state);
  const int64_t need = seq->max_blocks() - static_cast<int64_t>(seq->state.blocks.size());
  while (st.ok() && unpromised_blocks() < need && cache_.evict_one()) {
  }
  if (!st.ok() || unpromised_blocks() < need) {
    blocks_.free(seq->state);
    slots_.free(seq->state);
    seq->state.length = 0;
    if (st.ok()) return false;  // waits for running requests to return blocks
    seq->phase = SequencePhase::kFinished;  // a device failure: the engine reports it
    seq->finish = FinishReason::kError;
    seq->error = st.message();
  } else {
    const int64_t len = chunk_len(*seq, budget);
    Status r = blocks_.reserve(seq->state, len);  // cannot fail: promised above
    if (!r.ok()) return false;
    seq->phase = SequencePhase::kPrefill;
    cycle.prefill.push_back({seq, len});
    cache_.record(hit);
  }
  std::lock_guard<std::mutex> lock(queue_mu_);
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  return true;
}

Cycle Scheduler::schedule() {
  Cycle cycle;
  const int64_t n = static_cast<int64_t>(running_.size());
  ++turn_;
  auto budget = [&] { return config_.max_batch_tokens - cycle.tokens(); };
  for (int64_t i = 0; i < n && budget() > 0; ++i) {
    Sequence* s = running_[static_cast<size_t>((i + static_cast<int64_t>(turn_)) % n)].get();
    if (s->phase != SequencePhase::kDecode || !s->channel->has_room()) continue;
    if (!blocks_.reserve(s->state, 1).ok()) continue;  // cannot happen: promised at admission
    cycle.decode.push_back(s);
  }
  for (int64_t i = 0; i < n && budget() > 0; ++i) {
    Sequence* s = running_[static_cast<size_t>((i + static_cast<int64_t>(turn_)) % n)].get();
    if (s->phase != SequencePhase::kPrefill) continue;
    const int64_t len = chunk_len(*s, budget());
    if (len <= 0 || !blocks_.reserve(s->state, len).ok()) continue;
    cycle.prefill.push_back({s, len});
  }
  while (budget() > 0 && admit_front(budget(), cycle)) {
  }
  return cycle;
}

std::unique_ptr<Sequence> Scheduler::retire(Sequence* seq) {
  auto it = std::find_if(running_.begin(), running_.end(), [&](const auto& p) { return p.get() == seq; });
  std::unique_ptr<Sequence> out = std::move(*it);
  running_.erase(it);
  blocks_.free(out->state);
  slots_.free(out->state);
  return out;
}

std::vector<std::unique_ptr<Sequence>> Scheduler::retire_all() {
  std::vector<std::unique_ptr<Sequence>> out;
  while (!running_.empty()) out.push_back(retire(running_.back().get()));
  std::lock_guard<std::mutex> lock(queue_mu_);
  for (auto& s : waiting_) out.push_back(std::move(s));
  waiting_.clear();
  return out;
}

}  // namespace kiln
