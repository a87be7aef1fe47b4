#include "engine/token_channel.h"

namespace kiln {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "?";
}

bool TokenChannel::has_room() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size() < capacity_;
}

void TokenChannel::push(TokenEvent e) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    finished_ |= e.finish != FinishReason::kNone;
    events_.push_back(std::move(e));
  }
  cv_.notify_all();
}

std::optional<TokenEvent> TokenChannel::try_pop() { return pop(std::chrono::milliseconds(0)); }

std::optional<TokenEvent> TokenChannel::pop(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  TokenEvent e = std::move(events_.front());
  events_.pop_front();
  return e;
}

bool TokenChannel::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

}  // namespace kiln
