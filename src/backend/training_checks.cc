// Structural checks of the training facet's arguments: presence, dtypes, shapes and the device
// every tensor must be on. Values are not read (they may live on a device).
#include "backend/training_checks.h"

namespace kiln {

namespace {
constexpr DType F = DType::kF32;
#define CHECK(...) KILN_RETURN_IF_ERROR(__VA_ARGS__)

// `t` shaped exactly as `like` (same rank and dimensions), f32, unit-stride in its last dimension.
Status check_like(const Tensor& t, const char* name, const Tensor& like, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(t, name, like.rank(), F, dev, r));
  for (int d = 0; d < like.rank(); ++d) CHECK(check_dim(t, name, d, like.dim(d), r));
  return {};
}

Status check_rows(const BatchLayout* l, int64_t tokens, DeviceKind dev, const std::string& r) {
  if (l == nullptr) return invalid_argument(r + ": no batch layout");
  if (l->tokens != tokens)
    return invalid_argument(r + ": the layout covers " + std::to_string(l->tokens) + " tokens, the tensors " +
                            std::to_string(tokens));
  CHECK(check_tensor(l->cu_seqlens, "cu_seqlens", 1, DType::kI32, dev, r));
  return check_dim(l->cu_seqlens, "cu_seqlens", 0, l->rows + 1, r);
}
}  // namespace

Status validate_train(const GemmArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.a, "a", 2, F, dev, r));
  CHECK(check_tensor(a.b, "b", 2, a.b.dtype(), dev, r));
  CHECK(check_tensor(a.out, "out", 2, F, dev, r));
  if (a.b.dtype() != F && !a.b.is_contiguous()) return invalid_argument(r + ": a bf16/f16 b must be contiguous");
  const int64_t m = a.trans_a ? a.a.dim(1) : a.a.dim(0), k = a.trans_a ? a.a.dim(0) : a.a.dim(1);
  const int64_t kb = a.trans_b ? a.b.dim(1) : a.b.dim(0), n = a.trans_b ? a.b.dim(0) : a.b.dim(1);
  if (k != kb)
    return invalid_argument(r + ": op(a) " + a.a.describe() + " has " + std::to_string(k) + " columns, op(b) " +
                            a.b.describe() + " " + std::to_string(kb) + " rows");
  CHECK(check_dim(a.out, "out", 0, m, r));
  return check_dim(a.out, "out", 1, n, r);
}

Status validate_train(const NormBackwardArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.x, "x", 2, F, dev, r));
  CHECK(check_tensor(a.weight, "weight", 1, F, dev, r));
  CHECK(check_dim(a.weight, "weight", 0, a.x.dim(1), r));
  CHECK(check_like(a.dout, "dout", a.x, dev, r));
  CHECK(check_like(a.dx, "dx", a.x, dev, r));
  if (a.kind == NormKind::kGated) {
    CHECK(check_like(a.gate, "gate", a.x, dev, r));
    CHECK(check_like(a.dgate, "dgate", a.x, dev, r));
  }
  return {};
}

Status validate_train(const SiluMulBackwardArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.a, "a", 2, F, dev, r));
  CHECK(check_like(a.b, "b", a.a, dev, r));
  CHECK(check_like(a.dout, "dout", a.a, dev, r));
  CHECK(check_like(a.da, "da", a.a, dev, r));
  return check_like(a.db, "db", a.a, dev, r);
}

Status validate_train(const RopeBackwardArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.dq, "dq", 3, F, dev, r));
  CHECK(check_tensor(a.dk, "dk", 3, F, dev, r));
  CHECK(check_tensor(a.positions, "positions", 1, DType::kI32, dev, r));
  CHECK(check_dim(a.dk, "dk", 0, a.dq.dim(0), r));
  CHECK(check_dim(a.dk, "dk", 2, a.dq.dim(2), r));
  return check_dim(a.positions, "positions", 0, a.dq.dim(0), r);
}

Status validate_train(const AttentionBackwardArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.q, "q", 3, F, dev, r));
  CHECK(check_tensor(a.k, "k", 3, F, dev, r));
  CHECK(check_dim(a.k, "k", 0, a.q.dim(0), r));
  CHECK(check_dim(a.k, "k", 2, a.q.dim(2), r));
  CHECK(check_like(a.v, "v", a.k, dev, r));
  CHECK(check_like(a.dout, "dout", a.q, dev, r));
  CHECK(check_like(a.dq, "dq", a.q, dev, r));
  CHECK(check_like(a.dk, "dk", a.k, dev, r));
  CHECK(check_like(a.dv, "dv", a.k, dev, r));
  if (a.gate.defined()) {
    CHECK(check_like(a.gate, "gate", a.q, dev, r));
    CHECK(check_like(a.dgate, "dgate", a.q, dev, r));
  }
  if (a.kept.defined() != a.out.defined())
    return invalid_argument(r + ": 'out' and 'kept' come together (the forward's output and what it kept)");
  if (a.out.defined()) CHECK(check_like(a.out, "out", a.q, dev, r));
  return check_rows(a.layout, a.q.dim(0), dev, r);
}

Status validate_train(const TokenLogprobArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.hidden, "hidden", 2, F, dev, r));
  CHECK(check_tensor(a.lm_head, "lm_head", 2, a.lm_head.dtype(), dev, r));
  if (!a.lm_head.is_contiguous()) return invalid_argument(r + ": lm_head must be contiguous");
  CHECK(check_dim(a.lm_head, "lm_head", 1, a.hidden.dim(1), r));
  const int64_t T = a.hidden.dim(0);
  CHECK(check_tensor(a.targets, "targets", 1, DType::kI32, dev, r));
  CHECK(check_dim(a.targets, "targets", 0, T, r));
  CHECK(check_tensor(a.logp, "logp", 1, F, dev, r));
  CHECK(check_dim(a.logp, "logp", 0, T, r));
  CHECK(check_tensor(a.lse, "lse", 1, F, dev, r));
  return check_dim(a.lse, "lse", 0, T, r);
}

Status validate_train(const TokenLogprobBackwardArgs& a, DeviceKind dev, const std::string& r) {
  CHECK(check_tensor(a.hidden, "hidden", 2, F, dev, r));
  CHECK(check_tensor(a.lm_head, "lm_head", 2, a.lm_head.dtype(), dev, r));
  if (!a.lm_head.is_contiguous()) return invalid_argument(r + ": lm_head must be contiguous");
  CHECK(check_dim(a.lm_head, "lm_head", 1, a.hidden.dim(1), r));
  const int64_t T = a.hidden.dim(0);
  for (auto [t, n, dt] : {std::tuple{&a.targets, "targets", DType::kI32}, std::tuple{&a.lse, "lse", F},
                          std::tuple{&a.coef, "coef", F}}) {
    CHECK(check_tensor(*t, n, 1, dt, dev, r));
    CHECK(check_dim(*t, n, 0, T, r));
  }
  return check_like(a.dhidden, "dhidden", a.hidden, dev, r);
}

Status validate_train(const ConvBackwardArgs& a, DeviceKind dev, const std::string& r) {
  for (auto [t, n] : {std::pair{&a.x, "x"}, std::pair{&a.weight, "weight"}, std::pair{&a.dout, "dout"},
                      std::pair{&a.dx, "dx"}})
    KILN_RETURN_IF_ERROR(check_tensor(*t, n, 2, F, dev, r));
  const int64_t T = a.x.dim(0), C = a.x.dim(1);
  KILN_RETURN_IF_ERROR(check_dim(a.weight, "weight", 0, C, r));
  for (auto [t, n] : {std::pair{&a.dout, "dout"}, std::pair{&a.dx, "dx"}}) {
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 0, T, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 1, C, r));
  }
  if (a.weight.dim(1) < 1) return invalid_argument(r + ": the conv has no taps");
  return check_rows(a.layout, T, dev, r);
}

Status validate_train(const GdnBackwardArgs& a, DeviceKind dev, const std::string& r) {
  for (auto [t, n] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"}, std::pair{&a.dout, "dout"},
                      std::pair{&a.dq, "dq"}, std::pair{&a.dk, "dk"}, std::pair{&a.dv, "dv"}})
    KILN_RETURN_IF_ERROR(check_tensor(*t, n, 3, F, dev, r));
  const int64_t T = a.q.dim(0), Hk = a.q.dim(1), Dk = a.q.dim(2), Hv = a.v.dim(1), Dv = a.v.dim(2);
  for (auto [t, n] : {std::pair{&a.k, "k"}, std::pair{&a.dq, "dq"}, std::pair{&a.dk, "dk"}}) {
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 0, T, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 1, Hk, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 2, Dk, r));
  }
  for (auto [t, n] : {std::pair{&a.v, "v"}, std::pair{&a.dout, "dout"}, std::pair{&a.dv, "dv"}}) {
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 0, T, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 1, Hv, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 2, Dv, r));
  }
  for (auto [t, n] : {std::pair{&a.a, "a"}, std::pair{&a.b, "b"}, std::pair{&a.da, "da"}, std::pair{&a.db, "db"}}) {
    KILN_RETURN_IF_ERROR(check_tensor(*t, n, 2, F, dev, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 0, T, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 1, Hv, r));
  }
  for (auto [t, n] : {std::pair{&a.a_log, "a_log"}, std::pair{&a.dt_bias, "dt_bias"}}) {
    KILN_RETURN_IF_ERROR(check_tensor(*t, n, 1, F, dev, r));
    KILN_RETURN_IF_ERROR(check_dim(*t, n, 0, Hv, r));
  }
  if (Hk < 1 || Hv % Hk != 0)
    return invalid_argument(r + ": v_heads " + std::to_string(Hv) + " is not a multiple of k_heads " +
                            std::to_string(Hk));
  if (a.chunk < 1) return invalid_argument(r + ": chunk " + std::to_string(a.chunk) + " must be positive");
  return check_rows(a.layout, T, dev, r);
}

}  // namespace kiln
