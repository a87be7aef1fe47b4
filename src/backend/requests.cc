#include "backend/facets.h"
#include "backend/requests.h"
#include "backend/support.h"

#include <algorithm>

namespace kiln {

std::string_view support_state_name(SupportState s) {
  switch (s) {
    case SupportState::kNative: return "native";
    case SupportState::kNativeWithConstraints: return "native_with_constraints";
    case SupportState::kHostFallbackAllowed: return "host_fallback_allowed";
    case SupportState::kDeclined: return "declined";
    case SupportState::kNotBuilt: return "not_built";
  }
  return "?";
}

std::string_view phase_name(Phase p) { return p == Phase::kPrefill ? "prefill" : "decode"; }

std::string_view norm_kind_name(NormKind k) {
  static constexpr std::string_view kNames[] = {"rms_norm(1+w)", "rms_norm(w)", "gated_rms_norm"};
  return kNames[static_cast<int>(k)];
}

MatmulRequest describe(const MatmulArgs& a) {
  return {a.x.dim(0), a.w.dim(0), a.w.dim(1), a.x.dtype(), a.w.dtype(), a.out.dtype(), a.accumulate};
}

NormRequest describe(const NormArgs& a) {
  return {a.kind, a.x.dim(0), a.x.dim(1), a.x.dtype(), a.residual.defined(),
          a.out.defined() ? a.out.dtype() : DType::kF32};
}

RopeRequest describe(const RopeArgs& a) {
  return {a.q.dim(0), a.q.dim(1) + a.k.dim(1), a.q.dim(2), a.rotary_dim};
}

KvWriteRequest describe(const KvWriteArgs& a) {
  return {a.k.dim(0), a.k.dim(1), a.k.dim(2), static_cast<int>(a.k_cache.dim(1)), a.k_cache.dtype()};
}

// A missing layout describes as zero rows; validate() then reports it.
AttentionRequest describe(const AttentionArgs& a) {
  AttentionRequest r;
  r.phase = a.layout ? a.layout->phase : Phase::kPrefill;
  r.rows = a.layout ? a.layout->rows : 0;
  r.tokens = a.q.dim(0);
  r.q_heads = a.q.dim(1);
  r.kv_heads = a.k_cache.dim(2);
  r.head_dim = a.q.dim(2);
  r.max_kv_len = a.layout ? a.layout->max_kv_len : 0;
  r.block_size = static_cast<int>(a.k_cache.dim(1));
  r.output_gate = a.gate.defined();
  r.dtype = a.q.dtype();
  r.kv_dtype = a.k_cache.dtype();
  r.compute = a.compute;
  return r;
}

ConvRequest describe(const ConvArgs& a) {
  return {a.layout ? a.layout->phase : Phase::kPrefill, a.layout ? a.layout->rows : 0, a.x.dim(0), a.x.dim(1),
          a.weight.dim(1)};
}

GdnRequest describe(const GdnArgs& a) {
  GdnRequest r;
  r.phase = a.layout ? a.layout->phase : Phase::kPrefill;
  r.form = a.form;
  r.rows = a.layout ? a.layout->rows : 0;
  r.tokens = a.q.dim(0);
  r.k_heads = a.q.dim(1);
  r.v_heads = a.v.dim(1);
  r.dk = a.q.dim(2);
  r.dv = a.v.dim(2);
  r.chunk = a.chunk;
  r.state_dtype = a.state.dtype();
  r.compute = a.compute;
  return r;
}

GdnDecodeRequest describe(const GdnDecodeArgs& a) {
  GdnDecodeRequest r;
  r.rows = a.layout ? a.layout->rows : 0;
  r.tokens = a.mixed.defined() ? a.mixed.dim(0) : 0;
  r.k_heads = a.k_heads;
  r.dk = a.dk;
  r.v_heads = a.out.defined() && a.out.rank() == 3 ? a.out.dim(1) : 0;
  r.dv = a.out.defined() && a.out.rank() == 3 ? a.out.dim(2) : 0;
  r.conv_kernel = a.conv_weight.defined() && a.conv_weight.rank() == 2 ? a.conv_weight.dim(1) : 0;
  r.state_dtype = a.state.defined() ? a.state.dtype() : DType::kF32;
  return r;
}

ElementwiseRequest describe(const EmbedArgs& a) {
  return {ElementwiseOp::kEmbed, a.ids.dim(0), a.table.dim(1), a.table.dtype()};
}

ElementwiseRequest describe(const BinaryArgs& a) {
  return {a.op, a.a.dim(0), a.a.dim(1), a.a.dtype(), a.out.defined() ? a.out.dtype() : DType::kF32};
}

SampleRequest describe(const ArgmaxArgs& a) {
  const bool constrained = std::any_of(a.allowed.begin(), a.allowed.end(), [](const uint32_t* m) { return m != nullptr; });
  return {a.logits.dim(0), a.logits.dim(1), true, constrained};
}

SampleRequest describe(const SampleArgs& a) {
  bool constrained = false;
  for (const SampleRow& r : a.rows) constrained |= r.constrained();
  return {a.logits.defined() ? a.logits.dim(0) : 0, a.logits.defined() ? a.logits.dim(1) : 0, false, constrained};
}

}  // namespace kiln
