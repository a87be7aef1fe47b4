// A fixed pool of worker threads running parallel loops; the CPU kernels' only source of
// parallelism (BLAS runs single-threaded inside it).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace kiln {

class ThreadPool {
 public:
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }  // the caller works too

  // Calls fn(begin, end, worker) over [0, n) split into at most size() contiguous ranges of at
  // least `grain` items; returns when all are done. `worker` is in [0, size()). Nested calls
  // from inside a task run serially on the calling thread.
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t, int)>& fn);

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable wake_, done_;
  const std::function<void(int64_t, int64_t, int)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int job_parts_ = 0;
  // Written under mu_; read without it by the short spins that save a sleep/wake per loop.
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

// The process-wide pool: KILN_THREADS if set, else the hardware thread count.
ThreadPool& default_thread_pool();

}  // namespace kiln
