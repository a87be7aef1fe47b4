#include "backend/cuda/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace kiln::cuda {

std::unique_ptr<Profiler> Profiler::from_env(cudaStream_t stream) {
  const char* v = std::getenv("KILN_CUDA_PROFILE");
  if (v == nullptr || v[0] != '1') return nullptr;
  return std::make_unique<Profiler>(stream);
}

Profiler::~Profiler() {
  print();
  std::lock_guard<std::mutex> lock(mu_);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t Profiler::record() {
  cudaEvent_t e = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      e = free_.back();
      free_.pop_back();
    }
  }
  if (e == nullptr) cudaEventCreate(&e);
  cudaEventRecord(e, stream_);
  return e;
}

void Profiler::add(std::string name, cudaEvent_t begin, cudaEvent_t end, double host_us) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({std::move(name), begin, end, host_us});
  if (pending_.size() >= 4096) drain_locked();  // bounded: events are recycled
}

void Profiler::drain_locked() {
  if (pending_.empty()) return;
  cudaEventSynchronize(pending_.back().end);
  for (auto& p : pending_) {
    float ms = 0.f;
    if (cudaEventElapsedTime(&ms, p.begin, p.end) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = 0.f;
    }
    Total& t = totals_[p.name];
    ++t.calls;
    t.device_ms += ms;
    t.host_ms += p.host_us * 1e-3;
    free_.push_back(p.begin);
    free_.push_back(p.end);
  }
  pending_.clear();
}

void Profiler::print() {
  std::lock_guard<std::mutex> lock(mu_);
  drain_locked();
  if (totals_.empty()) return;
  std::vector<std::pair<std::string, Total>> rows(totals_.begin(), totals_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.device_ms > b.second.device_ms; });
  double dev = 0, host = 0;
  for (const auto& [n, t] : rows) {
    dev += t.device_ms;
    host += t.host_ms;
  }
  std::fprintf(stderr, "kiln cuda profile: %-64s %8s %11s %10s %11s %10s\n", "name", "calls", "device ms", "dev us/call",
               "host ms", "host us/call");
  for (const auto& [n, t] : rows)
    std::fprintf(stderr, "kiln cuda profile: %-64s %8llu %11.3f %10.2f %11.3f %10.2f\n", n.c_str(),
                 static_cast<unsigned long long>(t.calls), t.device_ms, 1e3 * t.device_ms / double(t.calls), t.host_ms,
                 1e3 * t.host_ms / double(t.calls));
  std::fprintf(stderr, "kiln cuda profile: %-64s %8s %11.3f %10s %11.3f\n", "total", "", dev, "", host);
  totals_.clear();
}

}  // namespace kiln::cuda
