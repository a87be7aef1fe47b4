#include "backend/training_facets.h"

namespace kiln {

std::string_view train_op_name(TrainOp op) {
  switch (op) {
    case TrainOp::kGemm: return "gemm";
    case TrainOp::kNormBackward: return "norm_backward";
    case TrainOp::kSiluMulBackward: return "silu_mul_backward";
    case TrainOp::kRopeBackward: return "rope_backward";
    case TrainOp::kAttentionBackward: return "attention_backward";
    case TrainOp::kConvBackward: return "conv_backward";
    case TrainOp::kGdnBackward: return "gdn_backward";
    case TrainOp::kTokenLogprobs: return "token_logprobs";
    case TrainOp::kTokenLogprobsBackward: return "token_logprobs_backward";
  }
  return "?";
}

std::string_view optimizer_kind_name(OptimizerKind k) {
  switch (k) {
    case OptimizerKind::kMuon: return "muon";
    case OptimizerKind::kAdamW: return "adam_w";
    case OptimizerKind::kSgd: return "sgd";
  }
  return "?";
}

namespace {
int64_t rows_of(const Tensor& t) { return t.defined() && t.rank() > 0 ? t.dim(0) : 0; }
int64_t last_dim(const Tensor& t) { return t.defined() && t.rank() > 0 ? t.dim(t.rank() - 1) : 0; }
int64_t layout_rows(const BatchLayout* l) { return l ? l->rows : 0; }
// The activations' dtype, so that a predicate can decline what its kernels do not read (the
// forward requests carry theirs the same way).
DType act_dtype(const Tensor& t) { return t.defined() ? t.dtype() : DType::kF32; }
// An op over activations x [tokens, width].
TrainRequest over_rows(TrainOp op, const Tensor& x) {
  return {.op = op, .tokens = rows_of(x), .width = last_dim(x), .dtype = act_dtype(x)};
}
// A log-probability op: hidden [tokens, width] against the LM head [vocab, width] (its dtype).
TrainRequest over_vocab(TrainOp op, const Tensor& hidden, const Tensor& lm_head) {
  return {.op = op, .tokens = rows_of(hidden), .width = last_dim(hidden), .out = rows_of(lm_head),
          .dtype = lm_head.defined() ? lm_head.dtype() : DType::kF32};
}
}  // namespace

TrainRequest describe(const GemmArgs& a) {
  TrainRequest r;
  r.op = TrainOp::kGemm;
  r.tokens = rows_of(a.out);
  r.width = last_dim(a.out);
  if (a.a.defined() && a.a.rank() == 2) r.inner = a.trans_a ? a.a.dim(0) : a.a.dim(1);
  r.dtype = a.b.defined() ? a.b.dtype() : DType::kF32;
  return r;
}

TrainRequest describe(const NormBackwardArgs& a) { return over_rows(TrainOp::kNormBackward, a.x); }

TrainRequest describe(const SiluMulBackwardArgs& a) { return over_rows(TrainOp::kSiluMulBackward, a.a); }

TrainRequest describe(const RopeBackwardArgs& a) {
  TrainRequest r;
  r.op = TrainOp::kRopeBackward;
  r.tokens = rows_of(a.dq);
  if (a.dq.defined() && a.dq.rank() == 3) r.q_heads = a.dq.dim(1), r.head_dim = a.dq.dim(2);
  if (a.dk.defined() && a.dk.rank() == 3) r.kv_heads = a.dk.dim(1);
  r.inner = a.rotary_dim;
  r.dtype = act_dtype(a.dq);
  return r;
}

TrainRequest describe(const AttentionBackwardArgs& a) {
  TrainRequest r;
  r.op = TrainOp::kAttentionBackward;
  r.rows = layout_rows(a.layout);
  r.tokens = rows_of(a.q);
  if (a.q.defined() && a.q.rank() == 3) r.q_heads = a.q.dim(1), r.head_dim = a.q.dim(2);
  if (a.k.defined() && a.k.rank() == 3) r.kv_heads = a.k.dim(1);
  r.dtype = act_dtype(a.q);
  return r;
}

TrainRequest describe(const ConvBackwardArgs& a) {
  TrainRequest r = over_rows(TrainOp::kConvBackward, a.x);
  r.rows = layout_rows(a.layout);
  r.kernel = last_dim(a.weight);
  return r;
}

TrainRequest describe(const GdnBackwardArgs& a) {
  TrainRequest r;
  r.op = TrainOp::kGdnBackward;
  r.rows = layout_rows(a.layout);
  r.tokens = rows_of(a.q);
  if (a.q.defined() && a.q.rank() == 3) r.q_heads = a.q.dim(1), r.head_dim = a.q.dim(2);
  if (a.v.defined() && a.v.rank() == 3) r.kv_heads = a.v.dim(1), r.inner = a.v.dim(2);
  r.dtype = act_dtype(a.q);
  return r;
}

TrainRequest describe(const TokenLogprobArgs& a) {
  return over_vocab(TrainOp::kTokenLogprobs, a.hidden, a.lm_head);
}

TrainRequest describe(const TokenLogprobBackwardArgs& a) {
  return over_vocab(TrainOp::kTokenLogprobsBackward, a.hidden, a.lm_head);
}

OptimizerRequest describe(const OptimizerStepArgs& a) {
  OptimizerRequest r;
  r.kind = a.kind;
  if (a.param.defined()) {
    r.rows = a.param.rank() >= 2 ? a.param.dim(0) : 1;
    r.cols = a.param.rank() >= 2 ? a.param.dim(1) : (a.param.rank() == 1 ? a.param.dim(0) : 1);
  }
  return r;
}

}  // namespace kiln
