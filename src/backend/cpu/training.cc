// Placeholder until the CPU backward ops land: every request is declined, naming itself.
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

namespace {
constexpr const char* kWhy = "not written yet on the CPU backend";
template <class Args>
Status decline(const Args& a) { return unsupported("declined " + describe(a).describe() + ": " + kWhy); }
}  // namespace

Support Training::supports(const TrainRequest&) const { return Support::declined(kWhy); }
Status Training::gemm(const GemmArgs& a) { return decline(a); }
Status Training::norm_backward(const NormBackwardArgs& a) { return decline(a); }
Status Training::silu_mul_backward(const SiluMulBackwardArgs& a) { return decline(a); }
Status Training::rope_backward(const RopeBackwardArgs& a) { return decline(a); }
Status Training::attention_backward(const AttentionBackwardArgs& a) { return decline(a); }
Status Training::token_logprobs(const TokenLogprobArgs& a) { return decline(a); }
Status Training::token_logprobs_backward(const TokenLogprobBackwardArgs& a) { return decline(a); }

}  // namespace kiln::cpu
