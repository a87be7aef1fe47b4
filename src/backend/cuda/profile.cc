#include "backend/cuda/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>

namespace kiln::cuda {

namespace {
// A call the device began within this long of its enqueue found the device waiting for the host.
constexpr float kStarvedUs = 20.f;
}  // namespace

std::unique_ptr<Profiler> Profiler::from_env(cudaStream_t stream) {
  const char* v = std::getenv("KILN_CUDA_PROFILE");
  if (v == nullptr || v[0] != '1') return nullptr;
  auto p = std::make_unique<Profiler>(stream);
  std::lock_guard<std::mutex> lock(p->mu_);
  p->rebase_locked();
  return p;
}

void Profiler::rebase_locked() {
  if (ref_ == nullptr) cudaEventCreate(&ref_);
  cudaEventRecord(ref_, stream_);
  cudaEventSynchronize(ref_);
  ref_host_ = std::chrono::steady_clock::now();
}

Profiler::~Profiler() {
  print();
  std::lock_guard<std::mutex> lock(mu_);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (ref_ != nullptr) cudaEventDestroy(ref_);
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

void Profiler::add(std::string name, cudaEvent_t begin, cudaEvent_t end, std::chrono::steady_clock::time_point host_begin,
                   double host_us) {
  std::lock_guard<std::mutex> lock(mu_);
  pending_.push_back({std::move(name), begin, end, host_begin, host_us});
  // Bounded (events are recycled), and rarely: a drain waits for the device, after which the
  // next calls' lags start from zero.
  if (pending_.size() >= 65536) drain_locked();
}

void Profiler::drain_locked() {
  if (pending_.empty()) return;
  cudaEventSynchronize(pending_.back().end);
  auto elapsed_ms = [](cudaEvent_t a, cudaEvent_t b) {
    float ms = 0.f;
    if (cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
      (void)cudaGetLastError();
      ms = 0.f;
    }
    return static_cast<double>(ms);
  };
  for (auto& p : pending_) {
    const double begin_ms = elapsed_ms(ref_, p.begin);  // on the device, after the reference
    const double enqueued_ms = std::chrono::duration<double, std::milli>(p.host_begin - ref_host_).count();
    const double lag_ms = std::max(0.0, begin_ms - enqueued_ms);
    Total& t = totals_[p.name];
    ++t.calls;
    t.device_ms += elapsed_ms(p.begin, p.end);
    t.host_ms += p.host_us * 1e-3;
    t.lag_ms += lag_ms;
    if (lag_ms * 1e3 < kStarvedUs) ++t.starved;
    lags_us_.push_back(static_cast<float>(lag_ms * 1e3));
    free_.push_back(p.begin);
    free_.push_back(p.end);
  }
  pending_.clear();
  rebase_locked();
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
  std::fprintf(stderr, "kiln cuda profile: %-64s %8s %11s %10s %11s %10s %10s %8s\n", "name", "calls", "device ms",
               "dev us/call", "host ms", "host us/call", "lag us/call", "starved");
  for (const auto& [n, t] : rows)
    std::fprintf(stderr, "kiln cuda profile: %-64s %8llu %11.3f %10.2f %11.3f %10.2f %10.1f %8llu\n", n.c_str(),
                 static_cast<unsigned long long>(t.calls), t.device_ms, 1e3 * t.device_ms / double(t.calls), t.host_ms,
                 1e3 * t.host_ms / double(t.calls), 1e3 * t.lag_ms / double(t.calls),
                 static_cast<unsigned long long>(t.starved));
  std::fprintf(stderr, "kiln cuda profile: %-64s %8s %11.3f %10s %11.3f\n", "total", "", dev, "", host);
  if (!lags_us_.empty()) {
    std::sort(lags_us_.begin(), lags_us_.end());
    auto pct = [&](double q) { return lags_us_[static_cast<size_t>(q * double(lags_us_.size() - 1))]; };
    const auto waited = std::lower_bound(lags_us_.begin(), lags_us_.end(), kStarvedUs) - lags_us_.begin();
    std::fprintf(stderr,
                 "kiln cuda profile: lag (device begin - host enqueue) p10 %.1f us, p50 %.1f us, p90 %.1f us, max %.1f "
                 "us; %.1f%% of calls began within %.0f us of their enqueue (the device waiting for the host)\n",
                 pct(0.1), pct(0.5), pct(0.9), lags_us_.back(), 100.0 * double(waited) / double(lags_us_.size()),
                 static_cast<double>(kStarvedUs));
  }
  totals_.clear();
  lags_us_.clear();
}

}  // namespace kiln::cuda
