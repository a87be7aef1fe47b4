#include "backend/cuda/cuda_facets.h"

namespace kiln::cuda {

namespace {
constexpr const char* kWhy = "not yet native on CUDA (training runs on the CPU reference backend for now)";
template <class Args>
Status decline(const Args& a) { return unsupported("declined " + describe(a).describe() + ": " + kWhy); }
}  // namespace

Support Training::supports(const TrainRequest&) const { return Support::declined(kWhy); }
Status Training::gemm(const GemmArgs& a) { return decline(a); }
Status Training::norm_backward(const NormBackwardArgs& a) { return decline(a); }
Status Training::silu_mul_backward(const SiluMulBackwardArgs& a) { return decline(a); }
Status Training::rope_backward(const RopeBackwardArgs& a) { return decline(a); }
Status Training::attention_backward(const AttentionBackwardArgs& a) { return decline(a); }
Status Training::conv_backward(const ConvBackwardArgs& a) { return decline(a); }
Status Training::gdn_backward(const GdnBackwardArgs& a) { return decline(a); }
Status Training::token_logprobs(const TokenLogprobArgs& a) { return decline(a); }
Status Training::token_logprobs_backward(const TokenLogprobBackwardArgs& a) { return decline(a); }

Support Optimizer::supports(const OptimizerRequest&) const { return Support::declined(kWhy); }
Status Optimizer::step(const OptimizerStepArgs& a) { return decline(a); }

}  // namespace kiln::cuda
