#include "backend/arg_checks.h"

#include <algorithm>
#include <cmath>

namespace kiln {

namespace {
const DType F = DType::kF32;
const char* device_name(DeviceKind d) {
  switch (d) {
    case DeviceKind::kHost: return "host";
    case DeviceKind::kCuda: return "cuda";
    case DeviceKind::kVulkan: return "vulkan";
  }
  return "?";
}
}  // namespace

Status check_transfer(const Tensor& host, const Tensor& dev, DeviceKind device, const char* what) {
  if (!host.defined() || !dev.defined()) return invalid_argument(std::string(what) + ": a tensor is missing");
  if (host.device().kind != DeviceKind::kHost)
    return invalid_argument(std::string(what) + ": " + host.describe() + " is not a host tensor");
  if (dev.device().kind != device)
    return invalid_argument(std::string(what) + ": " + dev.describe() + " is not a " + device_name(device) + " tensor");
  if (!host.is_contiguous() || !dev.is_contiguous())
    return invalid_argument(std::string(what) + ": both tensors must be contiguous");
  if (host.nbytes() != dev.nbytes() || host.dtype() != dev.dtype())
    return invalid_argument(std::string(what) + ": " + host.describe() + " does not match " + dev.describe());
  return {};
}

Status check_device_copy(const Tensor& s, const Tensor& d, DeviceKind device) {
  if (!s.defined() || !d.defined() || s.device().kind != device || d.device().kind != device)
    return invalid_argument(std::string("copy: both tensors must be ") + device_name(device) + " tensors");
  if (!s.is_contiguous() || !d.is_contiguous()) return invalid_argument("copy: both tensors must be contiguous");
  if (s.nbytes() != d.nbytes() || s.dtype() != d.dtype())
    return invalid_argument("copy: " + s.describe() + " does not match " + d.describe());
  return {};
}

Status check_tensor(const Tensor& t, const char* name, int rank, DType dtype, DeviceKind device, const std::string& req) {
  if (!t.defined()) return invalid_argument(req + ": tensor '" + name + "' is missing");
  if (t.device().kind != device)
    return invalid_argument(req + ": tensor '" + name + "' is on " + t.device().to_string() + ", not " + device_name(device));
  if (t.rank() != rank)
    return invalid_argument(req + ": tensor '" + name + "' has rank " + std::to_string(t.rank()) + ", expected " +
                            std::to_string(rank) + " (" + t.describe() + ")");
  if (t.dtype() != dtype)
    return invalid_argument(req + ": tensor '" + name + "' is " + t.describe() + ", expected dtype " +
                            std::string(dtype_name(dtype)));
  if (t.numel() > 0 && t.stride(rank - 1) != 1)
    return invalid_argument(req + ": tensor '" + name + "' must be unit-stride in its last dimension");
  return {};
}

Status check_dim(const Tensor& t, const char* name, int dim, int64_t expected, const std::string& req) {
  if (t.dim(dim) != expected)
    return invalid_argument(req + ": tensor '" + name + "' is " + t.describe() + ", dimension " + std::to_string(dim) +
                            " should be " + std::to_string(expected));
  return {};
}

Status declined(std::string_view backend, const std::string& req, const std::string& why) {
  return unsupported(std::string(backend) + " declined " + req + ": " + why);
}

#define CHECK(...) KILN_RETURN_IF_ERROR(__VA_ARGS__)

Status validate(const MatmulArgs& a, DeviceKind d, const std::string& r) {
  // x in the weight's 16-bit dtype: already the GEMM's operand (the backend's supports() decides).
  const bool x16 = a.x.defined() && a.w.defined() && a.x.dtype() == a.w.dtype() && a.w.dtype() != F;
  CHECK(check_tensor(a.x, "x", 2, x16 ? a.w.dtype() : F, d, r));
  CHECK(check_tensor(a.w, "w", 2, a.w.dtype(), d, r));
  CHECK(check_tensor(a.out, "out", 2, F, d, r));
  if (!a.w.is_contiguous()) return invalid_argument(r + ": weight must be contiguous");
  CHECK(check_dim(a.x, "x", 1, a.w.dim(1), r));
  CHECK(check_dim(a.out, "out", 0, a.x.dim(0), r));
  return check_dim(a.out, "out", 1, a.w.dim(0), r);
}

Status validate(const NormArgs& a, DeviceKind d, const std::string& r) {
  const int64_t rows = a.x.defined() ? a.x.dim(0) : 0, width = a.x.defined() ? a.x.dim(-1) : 0;
  CHECK(check_tensor(a.x, "x", 2, F, d, r));
  const bool out16 = a.out.defined() && (a.out.dtype() == DType::kBF16 || a.out.dtype() == DType::kF16);
  CHECK(check_tensor(a.out, "out", 2, out16 ? a.out.dtype() : F, d, r));
  CHECK(check_tensor(a.weight, "weight", 1, F, d, r));
  CHECK(check_dim(a.weight, "weight", 0, width, r));
  CHECK(check_dim(a.out, "out", 0, rows, r));
  CHECK(check_dim(a.out, "out", 1, width, r));
  if (a.residual.defined()) {
    CHECK(check_tensor(a.residual, "residual", 2, F, d, r));
    CHECK(check_dim(a.residual, "residual", 0, rows, r));
    CHECK(check_dim(a.residual, "residual", 1, width, r));
  }
  if (a.kind == NormKind::kGated) {
    CHECK(check_tensor(a.gate, "gate", 2, F, d, r));
    CHECK(check_dim(a.gate, "gate", 0, rows, r));
    CHECK(check_dim(a.gate, "gate", 1, width, r));
  }
  return {};
}

Status validate(const RopeArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.q, "q", 3, F, d, r));
  CHECK(check_tensor(a.k, "k", 3, F, d, r));
  CHECK(check_tensor(a.positions, "positions", 1, DType::kI32, d, r));
  CHECK(check_dim(a.k, "k", 0, a.q.dim(0), r));
  CHECK(check_dim(a.k, "k", 2, a.q.dim(2), r));
  return check_dim(a.positions, "positions", 0, a.q.dim(0), r);
}

Status validate(const KvWriteArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.k, "k", 3, F, d, r));
  CHECK(check_tensor(a.v, "v", 3, F, d, r));
  for (int dim = 0; dim < 3; ++dim) CHECK(check_dim(a.v, "v", dim, a.k.dim(dim), r));
  for (auto [t, n] : {std::pair{&a.k_cache, "k_cache"}, std::pair{&a.v_cache, "v_cache"}}) {
    CHECK(check_tensor(*t, n, 4, a.k_cache.dtype(), d, r));
    if (!t->is_contiguous()) return invalid_argument(r + ": " + n + " must be contiguous");
    CHECK(check_dim(*t, n, 0, a.k_cache.dim(0), r));
    CHECK(check_dim(*t, n, 1, a.k_cache.dim(1), r));
    CHECK(check_dim(*t, n, 2, a.k.dim(1), r));
    CHECK(check_dim(*t, n, 3, a.k.dim(2), r));
  }
  CHECK(check_tensor(a.slot_mapping, "slot_mapping", 1, DType::kI32, d, r));
  return check_dim(a.slot_mapping, "slot_mapping", 0, a.k.dim(0), r);
}

namespace {
// Shapes of a BatchLayout's index tensors. Index values are not read here (on a device that would
// synchronise); backends check or bound them where they use them.
Status check_layout(const BatchLayout* l, int64_t tokens, DeviceKind d, const std::string& r, bool kv, bool slots) {
  if (l == nullptr) return invalid_argument(r + ": no batch layout");
  if (l->tokens != tokens)
    return invalid_argument(r + ": the layout covers " + std::to_string(l->tokens) + " tokens, the tensors " +
                            std::to_string(tokens));
  CHECK(check_tensor(l->cu_seqlens, "cu_seqlens", 1, DType::kI32, d, r));
  CHECK(check_dim(l->cu_seqlens, "cu_seqlens", 0, l->rows + 1, r));
  if (kv) {
    CHECK(check_tensor(l->kv_lens, "kv_lens", 1, DType::kI32, d, r));
    CHECK(check_dim(l->kv_lens, "kv_lens", 0, l->rows, r));
    CHECK(check_tensor(l->block_tables, "block_tables", 2, DType::kI32, d, r));
    CHECK(check_dim(l->block_tables, "block_tables", 0, l->rows, r));
    if (!l->block_tables.is_contiguous()) return invalid_argument(r + ": block_tables must be contiguous");
  }
  if (slots) {
    CHECK(check_tensor(l->state_slots, "state_slots", 1, DType::kI32, d, r));
    CHECK(check_dim(l->state_slots, "state_slots", 0, l->rows, r));
  }
  return {};
}
}  // namespace

Status validate(const AttentionArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.q, "q", 3, F, d, r));
  CHECK(check_tensor(a.out, "out", 3, F, d, r));
  CHECK(check_dim(a.out, "out", 0, a.q.dim(0), r));
  CHECK(check_dim(a.out, "out", 1, a.q.dim(1), r));
  CHECK(check_dim(a.out, "out", 2, a.q.dim(2), r));
  if (a.gate.defined()) {
    CHECK(check_tensor(a.gate, "gate", 3, F, d, r));
    for (int dim = 0; dim < 3; ++dim) CHECK(check_dim(a.gate, "gate", dim, a.q.dim(dim), r));
  }
  CHECK(check_tensor(a.k_cache, "k_cache", 4, a.k_cache.dtype(), d, r));
  CHECK(check_tensor(a.v_cache, "v_cache", 4, a.k_cache.dtype(), d, r));
  CHECK(check_dim(a.k_cache, "k_cache", 3, a.q.dim(2), r));
  for (int dim = 0; dim < 4; ++dim) CHECK(check_dim(a.v_cache, "v_cache", dim, a.k_cache.dim(dim), r));
  for (auto [t, n] : {std::pair{&a.k_cache, "k_cache"}, std::pair{&a.v_cache, "v_cache"}})
    if (!t->is_contiguous()) return invalid_argument(r + ": " + n + " must be contiguous");
  CHECK(check_layout(a.layout, a.q.dim(0), d, r, true, false));
  if (a.layout->block_size != a.k_cache.dim(1))
    return invalid_argument(r + ": the layout's block size " + std::to_string(a.layout->block_size) +
                            " differs from the cache's " + std::to_string(a.k_cache.dim(1)));
  return {};
}

Status validate(const ConvArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.x, "x", 2, F, d, r));
  CHECK(check_tensor(a.out, "out", 2, F, d, r));
  CHECK(check_tensor(a.weight, "weight", 2, F, d, r));
  CHECK(check_tensor(a.state, "state", 3, F, d, r));
  const int64_t C = a.x.dim(1), K = a.weight.dim(1);
  CHECK(check_dim(a.weight, "weight", 0, C, r));
  CHECK(check_dim(a.state, "state", 1, K - 1, r));
  CHECK(check_dim(a.state, "state", 2, C, r));
  CHECK(check_dim(a.out, "out", 0, a.x.dim(0), r));
  CHECK(check_dim(a.out, "out", 1, C, r));
  return check_layout(a.layout, a.x.dim(0), d, r, false, true);
}

Status validate(const GdnArgs& a, DeviceKind d, const std::string& r) {
  for (auto [t, n] : {std::pair{&a.q, "q"}, std::pair{&a.k, "k"}, std::pair{&a.v, "v"}, std::pair{&a.out, "out"}})
    CHECK(check_tensor(*t, n, 3, F, d, r));
  const int64_t T = a.q.dim(0), Hv = a.v.dim(1);
  CHECK(check_dim(a.k, "k", 0, T, r));
  CHECK(check_dim(a.v, "v", 0, T, r));
  CHECK(check_dim(a.k, "k", 1, a.q.dim(1), r));
  CHECK(check_dim(a.k, "k", 2, a.q.dim(2), r));
  for (auto [t, n] : {std::pair{&a.a, "a"}, std::pair{&a.b, "b"}}) {
    CHECK(check_tensor(*t, n, 2, F, d, r));
    CHECK(check_dim(*t, n, 0, T, r));
    CHECK(check_dim(*t, n, 1, Hv, r));
  }
  for (auto [t, n] : {std::pair{&a.a_log, "a_log"}, std::pair{&a.dt_bias, "dt_bias"}}) {
    CHECK(check_tensor(*t, n, 1, F, d, r));
    CHECK(check_dim(*t, n, 0, Hv, r));
  }
  CHECK(check_tensor(a.state, "state", 4, a.state.dtype(), d, r));
  if (!a.state.is_contiguous()) return invalid_argument(r + ": state must be contiguous");
  CHECK(check_dim(a.state, "state", 1, Hv, r));
  CHECK(check_dim(a.state, "state", 2, a.q.dim(2), r));
  CHECK(check_dim(a.state, "state", 3, a.v.dim(2), r));
  CHECK(check_dim(a.out, "out", 0, T, r));
  CHECK(check_dim(a.out, "out", 1, Hv, r));
  CHECK(check_dim(a.out, "out", 2, a.v.dim(2), r));
  return check_layout(a.layout, T, d, r, false, true);
}

Status validate(const EmbedArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.ids, "ids", 1, DType::kI32, d, r));
  CHECK(check_tensor(a.table, "table", 2, a.table.dtype(), d, r));
  CHECK(check_tensor(a.out, "out", 2, F, d, r));
  CHECK(check_dim(a.out, "out", 0, a.ids.dim(0), r));
  return check_dim(a.out, "out", 1, a.table.dim(1), r);
}

Status validate(const BinaryArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.a, "a", 2, F, d, r));
  const BinaryOpInfo* info = binary_op_info(a.op);
  if (info == nullptr) return invalid_argument(r + ": embed is not a binary op");
  const bool out16 = info->out16 && a.out.defined() &&
                     (a.out.dtype() == DType::kBF16 || a.out.dtype() == DType::kF16);
  for (auto [t, n] : {std::pair{&a.b, "b"}, std::pair{&a.out, "out"}}) {
    CHECK(check_tensor(*t, n, 2, t == &a.out && out16 ? a.out.dtype() : F, d, r));
    CHECK(check_dim(*t, n, 0, a.a.dim(0), r));
    CHECK(check_dim(*t, n, 1, a.a.dim(1), r));
  }
  return {};
}

Status validate(const ArgmaxArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.logits, "logits", 2, F, d, r));
  CHECK(check_tensor(a.ids, "ids", 1, DType::kI32, d, r));
  if (!a.allowed.empty() && static_cast<int64_t>(a.allowed.size()) != a.logits.dim(0))
    return invalid_argument(r + ": " + std::to_string(a.allowed.size()) + " masks for " +
                            std::to_string(a.logits.dim(0)) + " logits rows");
  return check_dim(a.ids, "ids", 0, a.logits.dim(0), r);
}

Status validate(const SampleArgs& a, DeviceKind d, const std::string& r) {
  CHECK(check_tensor(a.logits, "logits", 2, F, d, r));
  CHECK(check_tensor(a.ids, "ids", 1, DType::kI32, DeviceKind::kHost, r));
  CHECK(check_tensor(a.logprobs, "logprobs", 1, F, DeviceKind::kHost, r));
  CHECK(check_dim(a.ids, "ids", 0, a.logits.dim(0), r));
  CHECK(check_dim(a.logprobs, "logprobs", 0, a.logits.dim(0), r));
  if (static_cast<int64_t>(a.rows.size()) != a.logits.dim(0))
    return invalid_argument(r + ": " + std::to_string(a.rows.size()) + " sample rows for " +
                            std::to_string(a.logits.dim(0)) + " logits rows");
  int64_t top = 0;  // the width top_ids and top_logprobs must have
  for (const SampleRow& x : a.rows) top = std::max<int64_t>(top, x.top_logprobs);
  if (top > 0 || a.top_ids.defined() || a.top_logprobs.defined()) {
    CHECK(check_tensor(a.top_ids, "top_ids", 2, DType::kI32, DeviceKind::kHost, r));
    CHECK(check_tensor(a.top_logprobs, "top_logprobs", 2, F, DeviceKind::kHost, r));
    for (const Tensor* t : {&a.top_ids, &a.top_logprobs}) {
      const char* name = t == &a.top_ids ? "top_ids" : "top_logprobs";
      CHECK(check_dim(*t, name, 0, a.logits.dim(0), r));
      if (!t->is_contiguous() || t->dim(1) < top)
        return invalid_argument(r + ": " + name + " is " + t->describe() + ", expected a contiguous [" +
                                std::to_string(a.logits.dim(0)) + ", >= " + std::to_string(top) + "]");
    }
  }
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const SampleRow& x = a.rows[i];
    auto bad = [&](const char* field, const char* rule, double v) {
      return invalid_argument(r + ": row " + std::to_string(i) + ": " + field + " must be " + rule + ", got " +
                              std::to_string(v));
    };
    if (!(x.temperature >= 0.f) || !std::isfinite(x.temperature)) return bad("temperature", ">= 0", x.temperature);
    if (x.top_logprobs < 0 || x.top_logprobs > kMaxTopLogprobs)
      return bad("top_logprobs", "in [0, 20]", x.top_logprobs);
    if (x.top_k < 0) return bad("top_k", ">= 0", x.top_k);
    if (!(x.top_p > 0.f && x.top_p <= 1.f)) return bad("top_p", "in (0, 1]", x.top_p);
    if (!(x.min_p >= 0.f && x.min_p <= 1.f)) return bad("min_p", "in [0, 1]", x.min_p);
    if (!(x.repetition_penalty > 0.f) || !std::isfinite(x.repetition_penalty))
      return bad("repetition_penalty", "> 0", x.repetition_penalty);
    if (!std::isfinite(x.presence_penalty)) return bad("presence_penalty", "finite", x.presence_penalty);
    if (!std::isfinite(x.frequency_penalty)) return bad("frequency_penalty", "finite", x.frequency_penalty);
    if (!(x.u >= 0 && x.u < 1)) return bad("u", "in [0, 1)", x.u);
    for (const auto& [id, b] : x.bias) {
      if (id < 0 || id >= a.logits.dim(1)) return bad("a logit bias id", "in [0, vocab)", id);
      if (!std::isfinite(b)) return bad("a logit bias", "finite", b);
    }
  }
  return {};
}

#undef CHECK

}  // namespace kiln
