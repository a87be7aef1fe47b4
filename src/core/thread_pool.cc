#include "core/thread_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace kiln {

namespace {
thread_local bool t_inside_task = false;

// Decode runs hundreds of short parallel loops per token; a thread that waits a few microseconds
// before sleeping avoids a futex sleep and wake (tens of microseconds) on each of them.
template <typename Ready>
bool spin_until(Ready ready) {
  for (int i = 0; i < 4000; ++i) {
    if (ready()) return true;
    _mm_pause();
  }
  return false;
}

std::pair<int64_t, int64_t> part_range(int64_t n, int parts, int i) {
  int64_t base = n / parts, extra = n % parts;
  int64_t begin = i * base + std::min<int64_t>(i, extra);
  return {begin, begin + base + (i < extra ? 1 : 0)};
}
}  // namespace

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < std::max(threads, 1); ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t, int)>& fn) {
  if (n <= 0) return;
  int parts = static_cast<int>(std::min<int64_t>(size(), std::max<int64_t>(1, n / std::max<int64_t>(grain, 1))));
  if (parts <= 1 || t_inside_task) {
    fn(0, n, 0);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  job_ = &fn;
  job_n_ = n;
  job_parts_ = parts;
  pending_ = parts - 1;
  ++generation_;
  lock.unlock();
  wake_.notify_all();

  t_inside_task = true;
  auto [b, e] = part_range(n, parts, 0);
  fn(b, e, 0);
  t_inside_task = false;

  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    lock.lock();
    done_.wait(lock, [&] { return pending_ == 0; });
    lock.unlock();
  }
  std::lock_guard<std::mutex> guard(mu_);
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  t_inside_task = true;
  for (;;) {
    spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
    std::unique_lock<std::mutex> lock(mu_);
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    if (index >= job_parts_) continue;
    auto* fn = job_;
    auto [b, e] = part_range(job_n_, job_parts_, index);
    lock.unlock();
    (*fn)(b, e, index);
    lock.lock();
    if (--pending_ == 0) done_.notify_one();
  }
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("KILN_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace kiln
