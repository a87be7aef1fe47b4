// Metrics: the server's counters and latency histograms, rendered in the Prometheus text format
// for GET /metrics together with gauges read from the engine at scrape time. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "engine/engine.h"

namespace kiln {

// A cumulative histogram with fixed upper bounds in seconds.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBounds = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                                                     0.25,  0.5,    1.0,   2.5,  5.0,   10.0, 30.0};
  void observe(double seconds);
  // Appends `name_bucket{le=...}`, `name_sum` and `name_count` lines (with `labels` inside the
  // braces, e.g. `route="/v1/chat/completions"`).
  void render(const std::string& name, const std::string& labels, std::string& out) const;

 private:
  mutable std::mutex mu_;
  std::array<uint64_t, kBounds.size()> counts_{};
  uint64_t count_ = 0;
  double sum_ = 0;
};

class Metrics {
 public:
  void request_finished(const std::string& route, int status, double seconds);
  // A request the pre-routing guard refused (request_guard.h), by its error code.
  void request_refused(const std::string& code);
  void time_to_first_token(double seconds) { ttft_.observe(seconds); }
  void inter_token(double seconds) { itl_.observe(seconds); }
  void tokens(int64_t prompt, int64_t generated) {
    prompt_tokens_ += prompt;
    generated_tokens_ += generated;
  }
  void active_requests(int delta) { active_ += delta; }
  int64_t active_requests() const { return active_.load(); }
  // A request-log row queued for the writer, or dropped because its queue was full.
  void request_log_row(bool queued) { ++(queued ? log_rows_queued_ : log_rows_dropped_); }

  std::string render(const EngineStats& engine) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;  // (route, status) -> count
  std::map<std::string, Histogram> latency_;                  // route -> request duration
  std::map<std::string, uint64_t> refused_;                   // error code -> count
  Histogram ttft_, itl_;
  std::atomic<int64_t> prompt_tokens_{0}, generated_tokens_{0}, active_{0};
  std::atomic<int64_t> log_rows_queued_{0}, log_rows_dropped_{0};
};

}  // namespace kiln
