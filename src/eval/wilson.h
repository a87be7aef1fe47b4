// The Wilson score interval for a pass rate (docs/evals.md "What the interval means"): unlike
// the normal approximation it stays inside [0, 1] and is not degenerate at 0/n or n/n.
#pragma once

#include <cstdint>

namespace kiln {

struct Interval {
  double low = 0, high = 0;
};

// `z` = 1.959964 is the two-sided 95% normal quantile. n = 0 gives [0, 1].
Interval wilson_interval(int64_t passed, int64_t n, double z = 1.959963984540054);

}  // namespace kiln
