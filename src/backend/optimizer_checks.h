// The checks every backend's optimizer step opens with (after its predicate): the parameter and
// its state present, f32, contiguous, shaped alike and on the backend's device; the
// hyperparameters in range. One definition, so a bad step reads the same on every backend.
#pragma once

#include <string>

#include "backend/training_facets.h"

namespace kiln {

Status validate_optimizer_step(const OptimizerStepArgs& a, DeviceKind device, const std::string& req);

}  // namespace kiln
