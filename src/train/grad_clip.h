// Clipping by the global gradient norm: the norm of every factor's gradient taken together,
// reduced on the backend (OptimizerFacet::sum_squares; only the sum crosses to the host), and the
// scale the optimizer step then applies to each gradient (OptimizerHyper::grad_scale).
#pragma once

#include <span>

#include "backend/training_facets.h"
#include "core/status.h"

namespace kiln {

struct GradClip {
  double norm = 0;   // before clipping: what a step reports
  float scale = 1;   // max_norm / (norm + 1e-6) when the norm exceeds max_norm, else 1
};

// `max_norm` 0: no clipping (the norm is still measured). A norm that is not finite is an error:
// a step on it would ruin the adapter.
Result<GradClip> clip_by_global_norm(OptimizerFacet& optimizer, std::span<const Tensor> grads, double max_norm);

}  // namespace kiln
