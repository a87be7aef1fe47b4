#include "eval/wilson.h"

#include <algorithm>
#include <cmath>

namespace kiln {

Interval wilson_interval(int64_t passed, int64_t n, double z) {
  if (n <= 0) return {0, 1};
  const double nn = static_cast<double>(n);
  const double p = static_cast<double>(passed) / nn;
  const double z2 = z * z;
  const double denom = 1 + z2 / nn;
  const double centre = (p + z2 / (2 * nn)) / denom;
  const double half = z * std::sqrt(p * (1 - p) / nn + z2 / (4 * nn * nn)) / denom;
  // At 0/n (n/n) the bound is exactly 0 (1); rounding would leave ~1e-17 there.
  return {passed <= 0 ? 0.0 : std::max(0.0, centre - half), passed >= n ? 1.0 : std::min(1.0, centre + half)};
}

}  // namespace kiln
