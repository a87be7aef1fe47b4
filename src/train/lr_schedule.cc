#include "train/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace kiln {

std::string_view lr_schedule_name(LrSchedule s) {
  switch (s) {
    case LrSchedule::kConstant: return "constant";
    case LrSchedule::kLinear: return "linear";
    case LrSchedule::kCosine: return "cosine";
  }
  return "?";
}

std::optional<LrSchedule> parse_lr_schedule(std::string_view name) {
  for (LrSchedule s : {LrSchedule::kConstant, LrSchedule::kLinear, LrSchedule::kCosine})
    if (lr_schedule_name(s) == name) return s;
  return std::nullopt;
}

double scheduled_lr(double lr, const LrScheduleSpec& spec, int64_t step, int64_t total_steps) {
  const int64_t w = spec.warmup_steps;
  if (step <= w) return lr * static_cast<double>(step) / static_cast<double>(w);
  const double p = static_cast<double>(step - w - 1) / static_cast<double>(total_steps - w);
  switch (spec.kind) {
    case LrSchedule::kConstant: return lr;
    case LrSchedule::kLinear: return lr * (1.0 - p);
    case LrSchedule::kCosine: return lr * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  }
  return lr;
}

}  // namespace kiln
