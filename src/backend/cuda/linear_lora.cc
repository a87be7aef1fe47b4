// LoRA deltas on the device. Segments of at most kLoraMaxTokens tokens (decode rows, short
// prefill tails) go to the shrink and expand kernels (kernels/lora.h), kLoraMaxSegments a launch
// pair, whatever the number of adapters; longer segments (prefill) are two GEMMs each, where
// cuBLASLt is the right tool: u = x A^T, then out += coef u B^T (coef as the GEMM's alpha). A
// call that keeps u (LoraDeltaArgs::u) takes the GEMMs whatever its length.
// Short segments add first, in order, then the long ones in order: deterministic either way.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernels/lora.h"
#include "backend/cuda/profile.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/views.h"
#include "backend/lora_delta.h"

namespace kiln::cuda {

Status Linear::lora_delta(const LoraDeltaArgs& a) {
  static const std::string kNoText;  // the request's text is built only for an error
  if (!validate(a, DeviceKind::kCuda, kNoText).ok()) return validate(a, DeviceKind::kCuda, describe_lora_delta(a));
  ProfileScope prof(ctx_->profiler.get(), [&] { return describe_lora_delta(a); });
  // tuning().lora_kernel off (tests): the matmul sequence the kernels replaced (66x slower on a
  // 64-adapter decode batch, docs/decisions.md), its temporaries from this backend's pool when the
  // caller gave none.
  if (!tuning().lora_kernel) {
    Storage own(ctx_);
    LoraDeltaArgs with_storage = a;
    if (with_storage.storage == nullptr) with_storage.storage = &own;
    return lora_delta_through_matmul(*this, with_storage, lora_scalings_);
  }
  const auto in_call = [&](Status st) { return st.ok() ? st : st.with_context(describe_lora_delta(a)); };
  LoraParams p;
  p.in = a.x.dim(1);
  p.out = a.out.dim(1);
  p.x = {a.x.data<float>(), a.x.dim(0) == 1 ? p.in : a.x.stride(0)};  // a single row's stride is never used
  p.y = rows_of<float>(a.out);
  const bool rows_apply = p.out >= 1 && lora_rows_apply(p.x.ptr, p.x.stride, p.in);

  // Which segments the kernels take, and their scratch (each u padded to 16 bytes).
  std::vector<LoraKernelSegment> short_segs;
  std::vector<const LoraSegment*> long_segs;
  int64_t u_elems = 0;
  for (const LoraSegment& s : a.segments) {
    const int64_t n = s.end - s.begin, r = s.a.dim(0);
    if (n == 0 || s.coef == 0.f || p.in == 0 || p.out == 0) continue;
    LoraKernelSegment k;
    k.a = s.a.raw();
    k.b = s.b.raw();
    k.begin = static_cast<int32_t>(s.begin);
    k.tokens = static_cast<int32_t>(std::min<int64_t>(n, kLoraMaxTokens + 1));
    k.rank = static_cast<int32_t>(std::min<int64_t>(r, int64_t{1} << 20));
    k.coef = s.coef;
    k.a_dtype = s.a.dtype();
    k.b_dtype = s.b.dtype();
    k.b_vector = r % 8 == 0 && reinterpret_cast<uintptr_t>(k.b) % 16 == 0;
    const int64_t padded = (n * r + 3) / 4 * 4;
    if (!a.u.defined() && rows_apply && n <= kLoraMaxTokens && r == k.rank && s.begin < (int64_t{1} << 30) &&
        u_elems + padded < (int64_t{1} << 30) && lora_segment_applies(k)) {
      k.u_offset = static_cast<int32_t>(u_elems);
      u_elems += padded;
      short_segs.push_back(k);
    } else {
      long_segs.push_back(&s);
    }
  }

  if (!short_segs.empty()) {
    KILN_ASSIGN_OR_RETURN(Tensor u, ctx_->empty({u_elems}, DType::kF32));
    p.u = u.data<float>();
    for (size_t first = 0; first < short_segs.size(); first += kLoraMaxSegments) {
      const size_t count = std::min<size_t>(kLoraMaxSegments, short_segs.size() - first);
      std::copy_n(short_segs.begin() + static_cast<std::ptrdiff_t>(first), count, p.seg);
      p.segments = static_cast<int>(count);
      lora_plan_spans(p);
      KILN_RETURN_IF_ERROR(in_call(lora_shrink_expand(p, ctx_->stream)));
    }
  }

  for (const LoraSegment* s : long_segs) {
    const int64_t n = s->end - s->begin, r = s->a.dim(0);
    Tensor u = a.u;  // kept for the caller where it asks (one segment, validated)
    if (!u.defined()) {
      KILN_ASSIGN_OR_RETURN(u, ctx_->empty({n, r}, DType::kF32));
    }
    KILN_RETURN_IF_ERROR(in_call(matmul({a.x.slice(0, s->begin, s->end), s->a, u})));  // u = x A^T
    MatmulArgs d{u, s->b, a.out.slice(0, s->begin, s->end)};
    d.accumulate = true;
    KILN_RETURN_IF_ERROR(in_call(check_args(*this, d)));
    KILN_RETURN_IF_ERROR(in_call(cublaslt(d, describe(d), s->coef)));  // out += coef u B^T
  }
  return {};
}

}  // namespace kiln::cuda
