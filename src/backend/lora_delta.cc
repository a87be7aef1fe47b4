#include "backend/lora_delta.h"

#include <cmath>
#include <map>

#include "backend/arg_checks.h"

namespace kiln {

std::string describe_lora_delta(const LoraDeltaArgs& a) {
  const auto dim = [](const Tensor& t, int d) { return t.defined() && t.rank() == 2 ? t.dim(d) : int64_t{0}; };
  return "lora_delta tokens=" + std::to_string(dim(a.x, 0)) + " in=" + std::to_string(dim(a.x, 1)) +
         " out=" + std::to_string(dim(a.out, 1)) + " segments=" + std::to_string(a.segments.size());
}

Status validate(const LoraDeltaArgs& a, DeviceKind d, const std::string& r) {
  KILN_RETURN_IF_ERROR(check_tensor(a.x, "x", 2, DType::kF32, d, r));
  KILN_RETURN_IF_ERROR(check_tensor(a.out, "out", 2, DType::kF32, d, r));
  KILN_RETURN_IF_ERROR(check_dim(a.out, "out", 0, a.x.dim(0), r));
  const int64_t tokens = a.x.dim(0), in = a.x.dim(1), out = a.out.dim(1);
  // No text is built unless something is wrong: this runs for every projection of every step.
  for (size_t i = 0; i < a.segments.size(); ++i) {
    const LoraSegment& s = a.segments[i];
    const auto where = [&] { return r + ": segment " + std::to_string(i); };
    if (s.begin < 0 || s.end < s.begin || s.end > tokens)
      return invalid_argument(where() + " covers tokens [" + std::to_string(s.begin) + ", " + std::to_string(s.end) +
                              "), outside the " + std::to_string(tokens) + " rows of x");
    if (!std::isfinite(s.coef)) return invalid_argument(where() + " has coef " + std::to_string(s.coef));
    const auto check_factor = [&](const Tensor& t, const char* name) -> Status {
      if (t.defined() && t.device().kind == d && t.rank() == 2 && is_float(t.dtype()) && t.is_contiguous()) return {};
      const std::string w = where();
      KILN_RETURN_IF_ERROR(check_tensor(t, name, 2, t.defined() ? t.dtype() : DType::kF32, d, w));
      if (!is_float(t.dtype()))
        return invalid_argument(w + ": tensor '" + name + "' is " + t.describe() + ", expected f32, bf16 or f16");
      return invalid_argument(w + ": tensor '" + name + "' must be contiguous");
    };
    KILN_RETURN_IF_ERROR(check_factor(s.a, "a"));
    KILN_RETURN_IF_ERROR(check_factor(s.b, "b"));
    if (s.a.dim(0) < 1) return invalid_argument(where() + ": tensor 'a' is " + s.a.describe() + ", rank 0");
    if (s.a.dim(1) != in)
      return invalid_argument(where() + ": tensor 'a' is " + s.a.describe() + ", x has " + std::to_string(in) + " columns");
    if (s.b.dim(1) != s.a.dim(0))
      return invalid_argument(where() + ": tensor 'b' is " + s.b.describe() + ", a has rank " + std::to_string(s.a.dim(0)));
    if (s.b.dim(0) != out)
      return invalid_argument(where() + ": tensor 'b' is " + s.b.describe() + ", out has " + std::to_string(out) +
                              " columns");
  }
  if (a.u.defined()) {
    if (a.segments.size() != 1 || a.segments[0].begin != 0 || a.segments[0].end != tokens)
      return invalid_argument(r + ": tensor 'u' asks for x A^T of one segment over all " + std::to_string(tokens) +
                              " tokens, and there are " + std::to_string(a.segments.size()) + " segments");
    KILN_RETURN_IF_ERROR(check_tensor(a.u, "u", 2, DType::kF32, d, r));
    KILN_RETURN_IF_ERROR(check_dim(a.u, "u", 0, tokens, r));
    KILN_RETURN_IF_ERROR(check_dim(a.u, "u", 1, a.segments[0].a.dim(0), r));
    if (!a.u.is_contiguous()) return invalid_argument(r + ": tensor 'u' must be contiguous");
  }
  return {};
}

Status lora_delta_through_matmul(LinearFacet& lin, const LoraDeltaArgs& a, LoraScalings& scalings) {
  if (a.storage == nullptr)
    return invalid_argument(describe_lora_delta(a) +
                            ": the default lora_delta (through matmul) needs a storage facet for its temporaries");
  for (const LoraSegment& s : a.segments) {
    const int64_t n = s.end - s.begin, r = s.a.dim(0);
    if (n == 0 || s.coef == 0.f) continue;
    Tensor u = a.u;
    if (!u.defined()) {
      KILN_ASSIGN_OR_RETURN(u, a.storage->allocate({n, r}, DType::kF32));
    }
    KILN_RETURN_IF_ERROR(lin.matmul({a.x.slice(0, s.begin, s.end), s.a, u}));  // u = x A^T
    if (s.coef != 1.f) {
      Tensor& scale = scalings[{r, s.coef}];
      if (!scale.defined()) {
        Tensor diag = Tensor::empty({r, r}, DType::kF32);
        for (int64_t k = 0; k < r * r; ++k) diag.data<float>()[k] = k % (r + 1) == 0 ? s.coef : 0.f;
        KILN_ASSIGN_OR_RETURN(scale, a.storage->upload(diag));
      }
      KILN_ASSIGN_OR_RETURN(Tensor v, a.storage->allocate({n, r}, DType::kF32));
      KILN_RETURN_IF_ERROR(lin.matmul({u, scale, v}));  // v = coef u
      u = v;
    }
    MatmulArgs d{u, s.b, a.out.slice(0, s.begin, s.end)};
    d.accumulate = true;  // out += (coef x A^T) B^T
    KILN_RETURN_IF_ERROR(lin.matmul(d));
  }
  return {};
}

// Temporaries (and the coef * I matrices) are made per call: a backend that runs adapters often
// implements lora_delta itself.
Status LinearFacet::lora_delta(const LoraDeltaArgs& a) {
  KILN_RETURN_IF_ERROR(validate(a, a.x.defined() ? a.x.device().kind : DeviceKind::kHost, describe_lora_delta(a)));
  LoraScalings scalings;
  return lora_delta_through_matmul(*this, a, scalings);
}

}  // namespace kiln
