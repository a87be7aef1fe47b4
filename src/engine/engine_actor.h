// EngineActor: the thread that owns an Engine and runs its cycles while there is work, so that
// a server's handlers only submit requests and read their TokenChannels.
#pragma once

#include <atomic>
#include <condition_variable>
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
  // The last error a cycle returned ("" if none), for logs and /health.
  std::string last_error() const;
  // The engine's counters as of the end of the last cycle (for /metrics).
  EngineStats stats() const;

 private:
  void loop();

  std::unique_ptr<Engine> engine_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  std::string last_error_;
  EngineStats stats_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace kiln
