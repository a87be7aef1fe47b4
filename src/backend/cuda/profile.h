// KILN_CUDA_PROFILE=1: per-name totals of device time (a pair of CUDA events around each facet
// call, on the backend's stream) and host time (wall clock inside the call), printed to stderr
// as a table when the backend goes away. Off (the default), a scope costs one branch.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace kiln::cuda {

class Profiler {
 public:
  explicit Profiler(cudaStream_t stream) : stream_(stream) {}
  ~Profiler();
  // Null unless KILN_CUDA_PROFILE=1.
  static std::unique_ptr<Profiler> from_env(cudaStream_t stream);

  cudaEvent_t record();  // an event recorded on the stream now
  void add(std::string name, cudaEvent_t begin, cudaEvent_t end, double host_us);
  void print();          // totals so far, largest device time first

 private:
  struct Pending {
    std::string name;
    cudaEvent_t begin, end;
    double host_us;
  };
  struct Total {
    uint64_t calls = 0;
    double device_ms = 0, host_ms = 0;
  };
  void drain_locked();  // waits for the pending events and folds them into the totals

  cudaStream_t stream_;
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
  std::vector<Pending> pending_;
  std::map<std::string, Total> totals_;
};

// Times the enclosing facet call under the name `name_fn()` (called only when profiling).
class ProfileScope {
 public:
  template <typename NameFn>
  ProfileScope(Profiler* p, NameFn&& name_fn) : p_(p) {
    if (p_ == nullptr) return;
    name_ = name_fn();
    t0_ = std::chrono::steady_clock::now();
    begin_ = p_->record();
  }
  ~ProfileScope() {
    if (p_ == nullptr) return;
    cudaEvent_t end = p_->record();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0_).count();
    p_->add(std::move(name_), begin_, end, us);
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  Profiler* p_;
  std::string name_;
  std::chrono::steady_clock::time_point t0_;
  cudaEvent_t begin_ = nullptr;
};

}  // namespace kiln::cuda
