// TokenChannel: one request's bounded, thread-safe output queue between the engine (producer)
// and its client (consumer), and the client's way to cancel. A full channel pauses the request's
// decoding (backpressure) instead of blocking the engine; the finishing event always fits.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <optional>

#include "engine/request.h"

namespace kiln {

class TokenChannel {
 public:
  explicit TokenChannel(size_t capacity) : capacity_(capacity) {}

  // ---- engine side ----
  bool has_room() const;
  void push(TokenEvent e);  // callers check has_room() unless `e` finishes the request

  // ---- client side ----
  std::optional<TokenEvent> try_pop();
  // Waits up to `timeout` for an event.
  std::optional<TokenEvent> pop(std::chrono::milliseconds timeout);
  // Honoured at the engine's next cycle boundary.
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  bool finished() const;  // the finishing event has been pushed

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;
  std::atomic<bool> cancelled_{false};
};

}  // namespace kiln
