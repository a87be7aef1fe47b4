#include "engine/engine_actor.h"

#include <chrono>

namespace kiln {

EngineActor::EngineActor(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), stats_(engine_->stats()), thread_([this] { loop(); }) {}

EngineActor::~EngineActor() {
  stop_.store(true);
  wake_.notify_all();
  thread_.join();
}

Result<Submission> EngineActor::submit(RequestSpec spec) {
  auto sub = engine_->submit(std::move(spec));
  if (sub.ok()) {
    // Taking the lock orders this wake-up after a loop that saw no work has started waiting.
    { std::lock_guard<std::mutex> lock(mu_); }
    wake_.notify_all();
  }
  return sub;
}

EngineStats EngineActor::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

std::string EngineActor::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

void EngineActor::loop() {
  using std::chrono::milliseconds;
  while (!stop_.load()) {
    if (!engine_->has_work()) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, milliseconds(50), [&] { return stop_.load() || engine_->has_work(); });
      continue;
    }
    auto r = engine_->step();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stats_ = engine_->stats();
      if (!r.ok()) last_error_ = r.status().to_string();
    }
    if (r.ok() && r->tokens == 0 && r->finished == 0) {
      // Every running request is paused on a full channel (or waits for blocks): poll gently
      // rather than spin; clients draining their channels need no wake-up path of their own.
      std::this_thread::sleep_for(milliseconds(1));
    }
  }
}

}  // namespace kiln
