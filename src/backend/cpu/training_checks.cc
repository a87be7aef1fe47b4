// Structural checks of the training facet's arguments on the CPU backend (host tensors).
#include "backend/cpu/training_checks.h"

namespace kiln::cpu {

namespace {
constexpr DType F = DType::kF32;
constexpr DeviceKind H = DeviceKind::kHost;
#define CHECK(...) KILN_RETURN_IF_ERROR(__VA_ARGS__)

// `t` shaped exactly as `like` (same rank and dimensions), f32, unit-stride in its last dimension.
Status check_like(const Tensor& t, const char* name, const Tensor& like, const std::string& r) {
  CHECK(check_tensor(t, name, like.rank(), F, H, r));
  for (int d = 0; d < like.rank(); ++d) CHECK(check_dim(t, name, d, like.dim(d), r));
  return {};
}

Status check_rows(const BatchLayout* l, int64_t tokens, const std::string& r) {
  if (l == nullptr) return invalid_argument(r + ": no batch layout");
  if (l->tokens != tokens)
    return invalid_argument(r + ": the layout covers " + std::to_string(l->tokens) + " tokens, the tensors " +
                            std::to_string(tokens));
  CHECK(check_tensor(l->cu_seqlens, "cu_seqlens", 1, DType::kI32, H, r));
  return check_dim(l->cu_seqlens, "cu_seqlens", 0, l->rows + 1, r);
}
}  // namespace

Status validate_train(const GemmArgs& a, const std::string& r) {
  CHECK(check_tensor(a.a, "a", 2, F, H, r));
  CHECK(check_tensor(a.b, "b", 2, a.b.dtype(), H, r));
  CHECK(check_tensor(a.out, "out", 2, F, H, r));
  if (a.b.dtype() != F && !a.b.is_contiguous()) return invalid_argument(r + ": a bf16/f16 b must be contiguous");
  const int64_t m = a.trans_a ? a.a.dim(1) : a.a.dim(0), k = a.trans_a ? a.a.dim(0) : a.a.dim(1);
  const int64_t kb = a.trans_b ? a.b.dim(1) : a.b.dim(0), n = a.trans_b ? a.b.dim(0) : a.b.dim(1);
  if (k != kb)
    return invalid_argument(r + ": op(a) " + a.a.describe() + " has " + std::to_string(k) + " columns, op(b) " +
                            a.b.describe() + " " + std::to_string(kb) + " rows");
  CHECK(check_dim(a.out, "out", 0, m, r));
  return check_dim(a.out, "out", 1, n, r);
}

Status validate_train(const NormBackwardArgs& a, const std::string& r) {
  CHECK(check_tensor(a.x, "x", 2, F, H, r));
  CHECK(check_tensor(a.weight, "weight", 1, F, H, r));
  CHECK(check_dim(a.weight, "weight", 0, a.x.dim(1), r));
  CHECK(check_like(a.dout, "dout", a.x, r));
  CHECK(check_like(a.dx, "dx", a.x, r));
  if (a.kind == NormKind::kGated) {
    CHECK(check_like(a.gate, "gate", a.x, r));
    CHECK(check_like(a.dgate, "dgate", a.x, r));
  }
  return {};
}

Status validate_train(const SiluMulBackwardArgs& a, const std::string& r) {
  CHECK(check_tensor(a.a, "a", 2, F, H, r));
  CHECK(check_like(a.b, "b", a.a, r));
  CHECK(check_like(a.dout, "dout", a.a, r));
  CHECK(check_like(a.da, "da", a.a, r));
  return check_like(a.db, "db", a.a, r);
}

Status validate_train(const RopeBackwardArgs& a, const std::string& r) {
  CHECK(check_tensor(a.dq, "dq", 3, F, H, r));
  CHECK(check_tensor(a.dk, "dk", 3, F, H, r));
  CHECK(check_tensor(a.positions, "positions", 1, DType::kI32, H, r));
  CHECK(check_dim(a.dk, "dk", 0, a.dq.dim(0), r));
  CHECK(check_dim(a.dk, "dk", 2, a.dq.dim(2), r));
  return check_dim(a.positions, "positions", 0, a.dq.dim(0), r);
}

Status validate_train(const AttentionBackwardArgs& a, const std::string& r) {
  CHECK(check_tensor(a.q, "q", 3, F, H, r));
  CHECK(check_tensor(a.k, "k", 3, F, H, r));
  CHECK(check_dim(a.k, "k", 0, a.q.dim(0), r));
  CHECK(check_dim(a.k, "k", 2, a.q.dim(2), r));
  CHECK(check_like(a.v, "v", a.k, r));
  CHECK(check_like(a.dout, "dout", a.q, r));
  CHECK(check_like(a.dq, "dq", a.q, r));
  CHECK(check_like(a.dk, "dk", a.k, r));
  CHECK(check_like(a.dv, "dv", a.k, r));
  if (a.gate.defined()) {
    CHECK(check_like(a.gate, "gate", a.q, r));
    CHECK(check_like(a.dgate, "dgate", a.q, r));
  }
  return check_rows(a.layout, a.q.dim(0), r);
}

Status validate_train(const TokenLogprobArgs& a, const std::string& r) {
  CHECK(check_tensor(a.hidden, "hidden", 2, F, H, r));
  CHECK(check_tensor(a.lm_head, "lm_head", 2, a.lm_head.dtype(), H, r));
  if (!a.lm_head.is_contiguous()) return invalid_argument(r + ": lm_head must be contiguous");
  CHECK(check_dim(a.lm_head, "lm_head", 1, a.hidden.dim(1), r));
  const int64_t T = a.hidden.dim(0);
  CHECK(check_tensor(a.targets, "targets", 1, DType::kI32, H, r));
  CHECK(check_dim(a.targets, "targets", 0, T, r));
  CHECK(check_tensor(a.logp, "logp", 1, F, H, r));
  CHECK(check_dim(a.logp, "logp", 0, T, r));
  CHECK(check_tensor(a.lse, "lse", 1, F, H, r));
  return check_dim(a.lse, "lse", 0, T, r);
}

Status validate_train(const TokenLogprobBackwardArgs& a, const std::string& r) {
  CHECK(check_tensor(a.hidden, "hidden", 2, F, H, r));
  CHECK(check_tensor(a.lm_head, "lm_head", 2, a.lm_head.dtype(), H, r));
  if (!a.lm_head.is_contiguous()) return invalid_argument(r + ": lm_head must be contiguous");
  CHECK(check_dim(a.lm_head, "lm_head", 1, a.hidden.dim(1), r));
  const int64_t T = a.hidden.dim(0);
  for (auto [t, n, dt] : {std::tuple{&a.targets, "targets", DType::kI32}, std::tuple{&a.lse, "lse", F},
                          std::tuple{&a.coef, "coef", F}}) {
    CHECK(check_tensor(*t, n, 1, dt, H, r));
    CHECK(check_dim(*t, n, 0, T, r));
  }
  return check_like(a.dhidden, "dhidden", a.hidden, r);
}

}  // namespace kiln::cpu
