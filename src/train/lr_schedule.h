// The learning rate of each optimizer step: a linear warmup over the first steps, then constant,
// linear decay or cosine decay over the rest (docs/training.md, "The run"). Host-side: the step's
// rate goes into that step's OptimizerHyper::lr.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace kiln {

enum class LrSchedule : uint8_t { kConstant, kLinear, kCosine };
std::string_view lr_schedule_name(LrSchedule s);  // "constant", "linear", "cosine"
std::optional<LrSchedule> parse_lr_schedule(std::string_view name);

struct LrScheduleSpec {
  LrSchedule kind = LrSchedule::kCosine;
  int64_t warmup_steps = 0;
};

// The rate of step `step` (1-based) of `total_steps`, for the base rate `lr`. Warmup: step k <=
// W takes lr * k / W (the W-th step reaches lr; none takes 0). After it, with p = (k - W - 1) /
// (total - W) in [0, 1): constant lr; linear lr * (1 - p); cosine lr * (1 + cos(pi p)) / 2. The
// first step after the warmup takes lr and the last a small positive rate, never 0.
double scheduled_lr(double lr, const LrScheduleSpec& spec, int64_t step, int64_t total_steps);

}  // namespace kiln
