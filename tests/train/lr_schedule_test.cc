// The learning-rate schedules of train/lr_schedule.h against values worked out by hand: 6 steps
// with 2 of warmup at a peak of 1, so the 4 steps after the warmup sit at p = 0, 1/4, 1/2, 3/4.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "train/lr_schedule.h"

namespace kiln {
namespace {

std::vector<double> rates(LrSchedule kind, int64_t warmup, int64_t total, double lr = 1.0) {
  std::vector<double> out;
  for (int64_t step = 1; step <= total; ++step) out.push_back(scheduled_lr(lr, {kind, warmup}, step, total));
  return out;
}

void expect_rates(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-12) << "step " << i + 1;
}

TEST(LrSchedule, WarmupRisesLinearlyToThePeakWithoutAStepAtZero) {
  expect_rates(rates(LrSchedule::kConstant, 4, 6, 0.5), {0.125, 0.25, 0.375, 0.5, 0.5, 0.5});
}

TEST(LrSchedule, ConstantKeepsThePeakAfterTheWarmup) {
  expect_rates(rates(LrSchedule::kConstant, 2, 6), {0.5, 1, 1, 1, 1, 1});
}

TEST(LrSchedule, LinearFallsFromThePeakByEqualStepsAndNeverReachesZero) {
  expect_rates(rates(LrSchedule::kLinear, 2, 6), {0.5, 1, 1, 0.75, 0.5, 0.25});
  expect_rates(rates(LrSchedule::kLinear, 0, 4), {1, 0.75, 0.5, 0.25});
}

TEST(LrSchedule, CosineFollowsHalfACosineFromThePeak) {
  // (1 + cos(pi p)) / 2 at p = 0, 1/4, 1/2, 3/4: 1, (2 + sqrt 2) / 4, 1/2, (2 - sqrt 2) / 4.
  const double r2 = std::sqrt(2.0);
  expect_rates(rates(LrSchedule::kCosine, 2, 6), {0.5, 1, 1, (2 + r2) / 4, 0.5, (2 - r2) / 4});
}

TEST(LrSchedule, AOneStepRunTakesThePeakRate) {
  for (LrSchedule k : {LrSchedule::kConstant, LrSchedule::kLinear, LrSchedule::kCosine})
    EXPECT_EQ(scheduled_lr(3e-3, {k, 0}, 1, 1), 3e-3) << lr_schedule_name(k);
}

TEST(LrSchedule, NamesParseBackAndOthersAreRefused) {
  for (LrSchedule k : {LrSchedule::kConstant, LrSchedule::kLinear, LrSchedule::kCosine})
    EXPECT_EQ(parse_lr_schedule(lr_schedule_name(k)), k);
  EXPECT_EQ(parse_lr_schedule("step"), std::nullopt);
  EXPECT_EQ(parse_lr_schedule("Cosine"), std::nullopt);
}

}  // namespace
}  // namespace kiln
