#include "loadgen/latency_stats.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <numeric>

namespace kiln::loadgen {
namespace {

double sorted_percentile(const std::vector<double>& sorted, double p) {
  p = std::clamp(p, 0.0, 100.0);
  const double h = static_cast<double>(sorted.size() - 1) * p / 100.0;
  const size_t lo = static_cast<size_t>(std::floor(h));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (h - static_cast<double>(lo)) * (sorted[hi] - sorted[lo]);
}

}  // namespace

double percentile(std::vector<double> values, double p) {
  assert(!values.empty());
  std::sort(values.begin(), values.end());
  return sorted_percentile(values, p);
}

LatencySummary summarize(const std::vector<double>& values) {
  LatencySummary s;
  if (values.empty()) return s;
  std::vector<double> sorted = values;
  std::sort(sorted.begin(), sorted.end());
  s.count = static_cast<int64_t>(sorted.size());
  s.p50 = sorted_percentile(sorted, 50);
  s.p99 = sorted_percentile(sorted, 99);
  s.mean = std::accumulate(sorted.begin(), sorted.end(), 0.0) / static_cast<double>(sorted.size());
  s.min = sorted.front();
  s.max = sorted.back();
  return s;
}

nlohmann::json summary_json(const LatencySummary& s) {
  if (s.count == 0) return {{"p50", nullptr}, {"p99", nullptr}, {"mean", nullptr}};
  return {{"p50", s.p50}, {"p99", s.p99}, {"mean", s.mean}};
}

}  // namespace kiln::loadgen
