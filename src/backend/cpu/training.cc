// What the CPU backend's training facet runs: every well-formed request natively (the ops live in
// training_*.cc, one concept per file); a request with a size of zero or a layout it cannot read
// is declined, naming the condition.
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Support Training::supports(const TrainRequest& r) const {
  auto positive = [](std::initializer_list<int64_t> v) {
    for (int64_t x : v)
      if (x <= 0) return false;
    return true;
  };
  const bool activations_op = r.op != TrainOp::kGemm && r.op != TrainOp::kTokenLogprobs &&
                              r.op != TrainOp::kTokenLogprobsBackward;
  if (activations_op && r.dtype != DType::kF32) return Support::declined("activations must be f32 on the cpu backend");
  switch (r.op) {
    case TrainOp::kGemm:
      if (!is_float(r.dtype)) return Support::declined("b must be f32, bf16 or f16");
      if (!positive({r.tokens, r.width, r.inner})) return Support::declined("gemm sizes must be positive");
      return Support::native();
    case TrainOp::kNormBackward:
    case TrainOp::kSiluMulBackward:
      if (!positive({r.tokens, r.width})) return Support::declined("rows and width must be positive");
      return Support::native();
    case TrainOp::kRopeBackward:
      if (!positive({r.tokens, r.q_heads, r.kv_heads, r.head_dim})) return Support::declined("sizes must be positive");
      if (r.inner <= 0 || r.inner % 2 != 0 || r.inner > r.head_dim)
        return Support::declined("rotary_dim must be even and within head_dim");
      return Support::native();
    case TrainOp::kAttentionBackward:
      if (!positive({r.rows, r.tokens, r.q_heads, r.kv_heads, r.head_dim}))
        return Support::declined("sizes must be positive");
      if (r.q_heads % r.kv_heads != 0) return Support::declined("q_heads must be a multiple of kv_heads");
      return Support::native();
    case TrainOp::kConvBackward:  // written in training_gdn.cc
      if (!positive({r.rows, r.tokens, r.width, r.kernel})) return Support::declined("sizes must be positive");
      return Support::native();
    case TrainOp::kGdnBackward:  // written in training_gdn.cc
      if (!positive({r.rows, r.tokens, r.q_heads, r.kv_heads, r.head_dim, r.inner}))
        return Support::declined("sizes must be positive");
      if (r.kv_heads % r.q_heads != 0) return Support::declined("v_heads is not a multiple of k_heads");
      return Support::native();
    case TrainOp::kTokenLogprobs:
    case TrainOp::kTokenLogprobsBackward:
      if (!is_float(r.dtype)) return Support::declined("lm_head must be f32, bf16 or f16");
      if (!positive({r.tokens, r.width, r.out})) return Support::declined("tokens, width and vocab must be positive");
      return Support::native();
  }
  return Support::declined("unknown training op");
}

}  // namespace kiln::cpu
