// The checks every backend's optimizer step opens with (after its predicate): the parameter and
// its state present, f32, contiguous, shaped alike and on the backend's device; the
// hyperparameters in range. Likewise for sum_squares' tensors. One definition, so a bad call
// reads the same on every backend.
#pragma once

#include <span>
#include <string>

#include "backend/training_facets.h"

namespace kiln {

Status validate_optimizer_step(const OptimizerStepArgs& a, DeviceKind device, const std::string& req);
// Every tensor present, f32, contiguous and on `device`; the error names the tensor by its index.
Status validate_sum_squares(std::span<const Tensor> tensors, DeviceKind device);

}  // namespace kiln
