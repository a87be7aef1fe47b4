// Percentiles and summaries of latency samples. Percentiles interpolate linearly between the
// closest ranks (numpy's default, Hyndman-Fan type 7): for n sorted samples x[0..n-1] and
// p in [0, 100], h = (n - 1) * p / 100 and the value is x[floor h] + (h - floor h) *
// (x[floor h + 1] - x[floor h]). So p50 of {1, 2, 3, 4} is 2.5, and p0 / p100 are min / max.
#pragma once

#include <cstdint>
#include <vector>

#include <nlohmann/json.hpp>

namespace kiln::loadgen {

// `values` need not be sorted; it must not be empty; p is clamped to [0, 100].
double percentile(std::vector<double> values, double p);

struct LatencySummary {
  int64_t count = 0;  // 0: no samples, and every other field is 0
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;
};

LatencySummary summarize(const std::vector<double>& values);

// {"p50", "p99", "mean"}; each null when there were no samples.
nlohmann::json summary_json(const LatencySummary& s);

}  // namespace kiln::loadgen
