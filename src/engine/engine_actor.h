// EngineActor: the thread that owns an Engine, and with it the device, and runs its cycles while
// there is work, so that a server's handlers only submit requests and read their TokenChannels.
// Every other device call of a server (adapter uploads and downloads, a training job's setup and
// steps) runs on the same thread between two cycles (run_between_cycles, a DeviceRunner), so it
// never overlaps a forward of the engine's or the recording of a decode step, and inference keeps
// going between its calls.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/engine.h"

namespace kiln {

class EngineActor {
 public:
  explicit EngineActor(std::unique_ptr<Engine> engine);
  ~EngineActor();  // stops the thread; requests still running end with kCancelled
  EngineActor(const EngineActor&) = delete;
  EngineActor& operator=(const EngineActor&) = delete;

  // Thread-safe: queues a request and wakes the actor. Cancel through the returned channel.
  Result<Submission> submit(RequestSpec spec);
  // Thread-safe: runs `fn` on the actor's thread at the next cycle boundary (one such call per
  // boundary, so cycles of the engine run between consecutive calls) and returns its status.
  // Blocks the caller; must not be called from the actor's thread. kFailedPrecondition when the
  // actor stops before `fn` ran.
  Status run_between_cycles(std::function<Status()> fn);
  // The last error a cycle returned ("" if none), for logs and /health.
  std::string last_error() const;
  // The engine's counters as of the end of the last cycle (for /metrics).
  EngineStats stats() const;

 private:
  struct Task {
    std::function<Status()> fn;
    std::promise<Status> done;
  };
  void loop();
  void run_one_task();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::string last_error_;
  EngineStats stats_;
  std::deque<std::shared_ptr<Task>> tasks_;  // under mu_
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kiln
