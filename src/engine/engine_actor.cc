#include "engine/engine_actor.h"

#include <chrono>

namespace kiln {

EngineActor::EngineActor(std::unique_ptr<Engine> engine)
    : engine_(std::move(engine)), stats_(engine_->stats()), thread_([this] { loop(); }) {}

EngineActor::~EngineActor() {
  stop_.store(true);
  wake_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& t : tasks_) t->done.set_value(failed_precondition("the engine stopped before the work ran"));
  tasks_.clear();
}

Status EngineActor::run_between_cycles(std::function<Status()> fn) {
  if (std::this_thread::get_id() == thread_.get_id())
    return internal_error("run_between_cycles called from the engine's own thread");
  auto task = std::make_shared<Task>();
  task->fn = std::move(fn);
  std::future<Status> result = task->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_.load()) return failed_precondition("the engine is stopping");
    tasks_.push_back(task);
  }
  wake_.notify_all();
  return result.get();
}

void EngineActor::run_one_task() {
  std::shared_ptr<Task> task;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (tasks_.empty()) return;
    task = std::move(tasks_.front());
    tasks_.pop_front();
  }
  Status st;
  try {
    st = task->fn();
  } catch (const std::exception& e) {
    st = internal_error(std::string("work run between cycles threw: ") + e.what());
  }
  task->done.set_value(std::move(st));
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
    run_one_task();  // at the boundary: the previous cycle's device work has settled
    if (!engine_->has_work()) {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait_for(lock, milliseconds(50),
                     [&] { return stop_.load() || engine_->has_work() || !tasks_.empty(); });
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
