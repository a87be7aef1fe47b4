// The Wilson interval against hand-computed values (z = 1.959964; worked by hand from the
// closed form, 4 decimals, matching published tables for 7/10 and 10/10).
#include <gtest/gtest.h>

#include "eval/wilson.h"

namespace kiln {
namespace {

TEST(Wilson, MatchesHandComputedIntervals) {
  struct Case { int64_t k, n; double low, high; };
  const Case cases[] = {
      {7, 10, 0.3968, 0.8922},   // centre 0.64449, half 0.24772
      {10, 10, 0.7225, 1.0},     // centre 0.86123, half 0.13877
      {0, 10, 0.0, 0.2775},
      {1, 2, 0.0945, 0.9055},    // symmetric around 1/2
      {50, 100, 0.4038, 0.5962},
  };
  for (const Case& c : cases) {
    Interval w = wilson_interval(c.k, c.n);
    EXPECT_NEAR(w.low, c.low, 1e-4) << c.k << "/" << c.n;
    EXPECT_NEAR(w.high, c.high, 1e-4) << c.k << "/" << c.n;
  }
}

TEST(Wilson, EndsAreExact) {
  EXPECT_EQ(wilson_interval(0, 3).low, 0.0);
  EXPECT_EQ(wilson_interval(3, 3).high, 1.0);
}

TEST(Wilson, NoExamplesIsTheWholeRange) {
  Interval w = wilson_interval(0, 0);
  EXPECT_EQ(w.low, 0.0);
  EXPECT_EQ(w.high, 1.0);
}

}  // namespace
}  // namespace kiln
