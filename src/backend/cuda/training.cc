// CUDA training support: the predicate of each op, defined beside the op (training.h), and the
// rule every op shares: sizes must be positive.
#include "backend/cuda/training.h"

namespace kiln::cuda {

Support Training::supports(const TrainRequest& r) const {
  switch (r.op) {
    case TrainOp::kGemm: return supports_gemm(r);
    case TrainOp::kNormBackward:
    case TrainOp::kSiluMulBackward:
    case TrainOp::kRopeBackward: return supports_pointwise(r);
    case TrainOp::kAttentionBackward: return supports_attention(r);
    case TrainOp::kConvBackward: return supports_conv(r);
    case TrainOp::kGdnBackward: return supports_gdn(r);
    case TrainOp::kTokenLogprobs:
    case TrainOp::kTokenLogprobsBackward: return supports_logprobs(r);
  }
  return Support::declined("unknown training op");
}

}  // namespace kiln::cuda
