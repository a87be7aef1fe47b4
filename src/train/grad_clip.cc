#include "train/grad_clip.h"

#include <cmath>
#include <string>

namespace kiln {

Result<GradClip> clip_by_global_norm(OptimizerFacet& optimizer, std::span<const Tensor> grads, double max_norm) {
  KILN_ASSIGN_OR_RETURN(const double squares, optimizer.sum_squares(grads));
  GradClip c;
  c.norm = std::sqrt(squares);
  if (!std::isfinite(c.norm)) return internal_error("the gradient norm is not finite (" + std::to_string(c.norm) + ")");
  // As torch.nn.utils.clip_grad_norm_: the epsilon keeps a norm just above max_norm from dividing by nearly itself.
  if (max_norm > 0 && c.norm > max_norm) c.scale = static_cast<float>(max_norm / (c.norm + 1e-6));
  return c;
}

}  // namespace kiln
