// KILN_CUDA_PROFILE=1: per-name totals of device time (a pair of CUDA events around each facet
// call, on the backend's stream) and host time (wall clock inside the call), printed to stderr
// as a table when the backend goes away. Off (the default), a scope costs one branch.
// Also each call's lag: how long after the host enqueued it the device began it (its begin
// event placed on the host's clock through a reference event the host waited for). A lag of a
// few microseconds means the device had nothing else queued and waited for the host; a long one
// means the host was ahead (device-bound). The device time of a call with no lag can include
// waits for the host inside the call.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <cstdint>
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
  void add(std::string name, cudaEvent_t begin, cudaEvent_t end, std::chrono::steady_clock::time_point host_begin,
           double host_us);
  void print();          // totals so far, largest device time first

 private:
  struct Pending {
    std::string name;
    cudaEvent_t begin, end;
    std::chrono::steady_clock::time_point host_begin;
    double host_us;
  };
  struct Total {
    uint64_t calls = 0;
    double device_ms = 0, host_ms = 0, lag_ms = 0;
    uint64_t starved = 0;  // calls the device began within kStarvedUs of their enqueue
  };
  void drain_locked();      // waits for the pending events and folds them into the totals
  void rebase_locked();     // a new reference: an event recorded and waited for, and the host's time then

  cudaEvent_t ref_ = nullptr;
  std::chrono::steady_clock::time_point ref_host_;
  std::vector<float> lags_us_;  // every call's lag, for the percentiles printed

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
    p_->add(std::move(name_), begin_, end, t0_, us);
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
