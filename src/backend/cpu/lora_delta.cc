// LoRA deltas on the CPU, segment by segment: u = x A^T and out += u B^T through this facet's
// matmul (so the f32 numerics are those of every other projection), u scaled in place between.
#include "backend/lora_delta.h"

#include <algorithm>
#include <span>

#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Status Linear::lora_delta(const LoraDeltaArgs& a) {
  const std::string req = describe_lora_delta(a);
  KILN_RETURN_IF_ERROR(validate(a, DeviceKind::kHost, req));
  const auto in_call = [&](Status st) { return st.ok() ? st : st.with_context(req); };
  for (const LoraSegment& s : a.segments) {
    const int64_t n = s.end - s.begin, r = s.a.dim(0);
    if (n == 0 || s.coef == 0.f) continue;
    Tensor u = Tensor::empty({n, r}, DType::kF32);
    KILN_RETURN_IF_ERROR(in_call(matmul({a.x.slice(0, s.begin, s.end), s.a, u})));
    if (a.u.defined()) std::copy_n(u.data<float>(), n * r, a.u.data<float>());  // kept unscaled
    if (s.coef != 1.f)
      for (float& v : std::span<float>(u.data<float>(), static_cast<size_t>(n * r))) v *= s.coef;
    MatmulArgs d{u, s.b, a.out.slice(0, s.begin, s.end)};
    d.accumulate = true;
    KILN_RETURN_IF_ERROR(in_call(matmul(d)));
  }
  return {};
}

}  // namespace kiln::cpu
