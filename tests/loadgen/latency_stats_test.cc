// Percentiles interpolate linearly between closest ranks (numpy's default).
#include "loadgen/latency_stats.h"

#include <gtest/gtest.h>

namespace kiln::loadgen {
namespace {

TEST(LatencyStats, PercentilesOfOneToHundred) {
  std::vector<double> v;
  for (int i = 100; i >= 1; --i) v.push_back(i);  // unsorted on purpose
  EXPECT_DOUBLE_EQ(percentile(v, 0), 1.0);
  EXPECT_DOUBLE_EQ(percentile(v, 50), 50.5);
  EXPECT_NEAR(percentile(v, 99), 99.01, 1e-9);
  EXPECT_DOUBLE_EQ(percentile(v, 100), 100.0);
  EXPECT_DOUBLE_EQ(percentile(v, 25), 25.75);
}

TEST(LatencyStats, SmallSetsInterpolate) {
  EXPECT_DOUBLE_EQ(percentile({1, 2, 3, 4}, 50), 2.5);
  EXPECT_NEAR(percentile({10, 20}, 99), 19.9, 1e-9);
  EXPECT_DOUBLE_EQ(percentile({7}, 50), 7.0);
  EXPECT_DOUBLE_EQ(percentile({7}, 99), 7.0);
  EXPECT_DOUBLE_EQ(percentile({3, 1, 2}, 150), 3.0);  // clamped to p100
}

TEST(LatencyStats, SummaryOfKnownData) {
  LatencySummary s = summarize({4, 1, 3, 2, 10});
  EXPECT_EQ(s.count, 5);
  EXPECT_DOUBLE_EQ(s.p50, 3.0);
  EXPECT_NEAR(s.p99, 9.76, 1e-9);  // h = 3.96: 4 + 0.96 * (10 - 4)
  EXPECT_DOUBLE_EQ(s.mean, 4.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 10.0);
  nlohmann::json j = summary_json(s);
  EXPECT_DOUBLE_EQ(j["p50"].get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(j["mean"].get<double>(), 4.0);
}

TEST(LatencyStats, EmptySummaryIsZeroAndJsonNull) {
  LatencySummary s = summarize({});
  EXPECT_EQ(s.count, 0);
  EXPECT_EQ(s.p50, 0.0);
  nlohmann::json j = summary_json(s);
  EXPECT_TRUE(j["p50"].is_null());
  EXPECT_TRUE(j["p99"].is_null());
  EXPECT_TRUE(j["mean"].is_null());
}

}  // namespace
}  // namespace kiln::loadgen
