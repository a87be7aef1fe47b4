// The gated delta rule (kernels/gated_delta_rule.cu). Both forms run the recurrent kernel; a
// chunked request is answered natively with that constraint stated (the WY kernel is future work).
#include "backend/arg_checks.h"
#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/gated_delta_rule.h"

namespace kiln::cuda {

Support Gdn::supports(const GdnRequest& r) const {
  if (r.state_dtype != DType::kF32) return Support::declined("the cuda GDN state is f32");
  if (r.k_heads <= 0 || r.v_heads % r.k_heads != 0) return Support::declined("v_heads must be a multiple of k_heads");
  if (r.form == GdnForm::kChunked && r.chunk < 1) return Support::declined("chunk must be positive");
  const size_t smem = gated_delta_rule_smem_bytes(r.dk, r.dv);
  if (smem > ctx_->props.sharedMemPerBlockOptin)
    return Support::declined("the state of one head (" + std::to_string(smem) + " bytes with its vectors) exceeds " +
                             std::to_string(ctx_->props.sharedMemPerBlockOptin) + " bytes of shared memory per block");
  if (r.rows > 65535) return Support::declined("more than 65535 rows");
  if (r.form == GdnForm::kChunked)
    return Support::constrained("runs the recurrent kernel, sequential over each row's tokens (chunked WY kernel: future work)");
  return Support::native();
}

Status Gdn::delta_rule(const GdnArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cuda", DeviceKind::kCuda));
  const GdnRequest r = describe(a);
  GatedDeltaRuleParams p;
  p.rows = r.rows;
  p.tokens = r.tokens;
  p.k_heads = r.k_heads;
  p.v_heads = r.v_heads;
  p.dk = r.dk;
  p.dv = r.dv;
  p.slots = a.state.dim(0);
  p.q = a.q.data<float>();
  p.q_token_stride = a.q.stride(0);
  p.q_head_stride = a.q.stride(1);
  p.k = a.k.data<float>();
  p.k_token_stride = a.k.stride(0);
  p.k_head_stride = a.k.stride(1);
  p.v = a.v.data<float>();
  p.v_token_stride = a.v.stride(0);
  p.v_head_stride = a.v.stride(1);
  p.a = a.a.data<float>();
  p.a_stride = a.a.stride(0);
  p.b = a.b.data<float>();
  p.b_stride = a.b.stride(0);
  p.a_log = a.a_log.data<float>();
  p.dt_bias = a.dt_bias.data<float>();
  p.state = a.state.data<float>();
  p.out = a.out.data<float>();
  p.out_token_stride = a.out.stride(0);
  p.out_head_stride = a.out.stride(1);
  p.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  p.state_slots = a.layout->state_slots.data<int32_t>();
  return cuda::gated_delta_rule(p, ctx_->stream).with_context(req);
}

}  // namespace kiln::cuda
