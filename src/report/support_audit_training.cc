// The audit's cases for the training facets: every backward op and optimizer step, each with a
// request the reference runs and one it must decline (an unsupported dtype or head grouping).
#include <cmath>

#include "report/audit_case.h"

namespace kiln {

namespace {

template <typename Args>
Result<AuditOutcome> train(Backend& be, const Args& a, Status (TrainingFacet::*method)(const Args&)) {
  return ask_and_run(a, [&](auto& r) { return be.training().supports(r); },
                     [&](auto& x) { return (be.training().*method)(x); });
}

}  // namespace

std::vector<AuditCase> training_audit_cases() {
  std::vector<AuditCase> c;
  for (DType b_dtype : {DType::kF32, DType::kBF16, DType::kI32})
    for (bool trans_a : {false, true})
      c.push_back({"training.gemm", [=](Backend& be) -> Result<AuditOutcome> {
                     // out [5, 8] = op(a) [5, 6] * b^T, b [8, 6]
                     KILN_AUDIT_TENSOR(a, trans_a ? Shape{6, 5} : Shape{5, 6}, DType::kF32);
                     KILN_AUDIT_TENSOR(b, {8, 6}, b_dtype);
                     KILN_AUDIT_TENSOR(out, {5, 8}, DType::kF32);
                     GemmArgs g{a, b, out, trans_a, true};
                     return train(be, g, &TrainingFacet::gemm);
                   }});
  for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated})
    for (DType d : {DType::kF32, DType::kBF16})
      c.push_back({"training.norm_backward", [=](Backend& be) -> Result<AuditOutcome> {
                     KILN_AUDIT_TENSOR(x, {4, 32}, d);
                     KILN_AUDIT_TENSOR(w, {32}, DType::kF32);
                     KILN_AUDIT_TENSOR(dout, {4, 32}, DType::kF32);
                     KILN_AUDIT_TENSOR(dx, {4, 32}, DType::kF32);
                     NormBackwardArgs n;
                     n.kind = kind;
                     n.x = x;
                     n.weight = w;
                     n.dout = dout;
                     n.dx = dx;
                     if (kind == NormKind::kGated) {
                       KILN_ASSIGN_OR_RETURN(n.gate, audit_tensor(be, {4, 32}, d));
                       KILN_ASSIGN_OR_RETURN(n.dgate, audit_tensor(be, {4, 32}, DType::kF32));
                     }
                     return train(be, n, &TrainingFacet::norm_backward);
                   }});
  for (DType d : {DType::kF32, DType::kBF16})
    c.push_back({"training.silu_mul_backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_AUDIT_TENSOR(a, {3, 8}, d);
                   KILN_AUDIT_TENSOR(b, {3, 8}, d);
                   KILN_AUDIT_TENSOR(dout, {3, 8}, DType::kF32);
                   KILN_AUDIT_TENSOR(da, {3, 8}, DType::kF32);
                   KILN_AUDIT_TENSOR(db, {3, 8}, DType::kF32);
                   return train(be, SiluMulBackwardArgs{a, b, dout, da, db}, &TrainingFacet::silu_mul_backward);
                 }});
  for (int64_t rot : {8, 7})
    c.push_back({"training.rope_backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_AUDIT_TENSOR(dq, {3, 4, 16}, DType::kF32);
                   KILN_AUDIT_TENSOR(dk, {3, 2, 16}, DType::kF32);
                   KILN_AUDIT_TENSOR(pos, {3}, DType::kI32);
                   return train(be, RopeBackwardArgs{dq, dk, pos, rot, 10000.f}, &TrainingFacet::rope_backward);
                 }});
  for (int64_t q_heads : {4, 3})
    c.push_back({"training.attention_backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_ASSIGN_OR_RETURN(BatchLayout bl, audit_layout(be, {5, 3}));
                   const int64_t T = bl.tokens;
                   AttentionBackwardArgs a;
                   KILN_ASSIGN_OR_RETURN(a.q, audit_tensor(be, {T, q_heads, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.k, audit_tensor(be, {T, 2, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.v, audit_tensor(be, {T, 2, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.gate, audit_tensor(be, {T, q_heads, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.dout, audit_tensor(be, {T, q_heads, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.dq, audit_tensor(be, {T, q_heads, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.dk, audit_tensor(be, {T, 2, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.dv, audit_tensor(be, {T, 2, 16}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(a.dgate, audit_tensor(be, {T, q_heads, 16}, DType::kF32));
                   a.layout = &bl;
                   a.scale = 0.25f;
                   return train(be, a, &TrainingFacet::attention_backward);
                 }});
  for (DType d : {DType::kF32, DType::kBF16})
    c.push_back({"training.conv_backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_ASSIGN_OR_RETURN(BatchLayout bl, audit_layout(be, {5, 2}));
                   KILN_AUDIT_TENSOR(x, {7, 24}, d);
                   KILN_AUDIT_TENSOR(w, {24, 4}, DType::kF32);
                   KILN_AUDIT_TENSOR(dout, {7, 24}, DType::kF32);
                   KILN_AUDIT_TENSOR(dx, {7, 24}, DType::kF32);
                   return train(be, ConvBackwardArgs{x, w, dout, dx, &bl}, &TrainingFacet::conv_backward);
                 }});
  for (int64_t k_heads : {2, 3})
    c.push_back({"training.gdn_backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_ASSIGN_OR_RETURN(BatchLayout bl, audit_layout(be, {5, 2}));
                   GdnBackwardArgs g;
                   g.chunk = 4;
                   for (Tensor* t : {&g.q, &g.k, &g.dq, &g.dk}) {
                     KILN_ASSIGN_OR_RETURN(*t, audit_tensor(be, {7, k_heads, 8}, DType::kF32));
                   }
                   for (Tensor* t : {&g.v, &g.dout, &g.dv}) {
                     KILN_ASSIGN_OR_RETURN(*t, audit_tensor(be, {7, 4, 8}, DType::kF32));
                   }
                   for (Tensor* t : {&g.a, &g.b, &g.da, &g.db}) {
                     KILN_ASSIGN_OR_RETURN(*t, audit_tensor(be, {7, 4}, DType::kF32));
                   }
                   KILN_ASSIGN_OR_RETURN(g.a_log, audit_tensor(be, {4}, DType::kF32));
                   KILN_ASSIGN_OR_RETURN(g.dt_bias, audit_tensor(be, {4}, DType::kF32));
                   g.layout = &bl;
                   return train(be, g, &TrainingFacet::gdn_backward);
                 }});
  for (DType head : {DType::kBF16, DType::kF32, DType::kI32})
    c.push_back({"training.token_logprobs+backward", [=](Backend& be) -> Result<AuditOutcome> {
                   KILN_AUDIT_TENSOR(hidden, {3, 8}, DType::kF32);
                   KILN_AUDIT_TENSOR(lm_head, {50, 8}, head);
                   KILN_AUDIT_TENSOR(targets, {3}, DType::kI32);
                   KILN_AUDIT_TENSOR(logp, {3}, DType::kF32);
                   KILN_AUDIT_TENSOR(lse, {3}, DType::kF32);
                   auto f = train(be, TokenLogprobArgs{hidden, lm_head, targets, logp, lse}, &TrainingFacet::token_logprobs);
                   if (!f.ok() || f->first.runs_natively() != f->second.second.ok()) return f;
                   KILN_AUDIT_TENSOR(coef, {3}, DType::kF32);
                   KILN_AUDIT_TENSOR(dhidden, {3, 8}, DType::kF32);
                   TokenLogprobBackwardArgs b{hidden, lm_head, targets, lse, coef, dhidden};
                   return train(be, b, &TrainingFacet::token_logprobs_backward);
                 }});
  for (OptimizerKind kind : {OptimizerKind::kMuon, OptimizerKind::kAdamW, OptimizerKind::kSgd})
    for (bool matrix : {true, false})
      c.push_back({"optimizer.step", [=](Backend& be) -> Result<AuditOutcome> {
                     const Shape s = matrix ? Shape{4, 8} : Shape{8};
                     OptimizerStepArgs o;
                     o.kind = kind;
                     for (Tensor* t : {&o.param, &o.grad, &o.m, &o.v}) {
                       KILN_ASSIGN_OR_RETURN(*t, audit_tensor(be, s, DType::kF32));
                     }
                     return ask_and_run(o, [&](auto& r) { return be.optimizer().supports(r); },
                                        [&](auto& x) { return be.optimizer().step(x); });
                   }});
  return c;
}

}  // namespace kiln
