// Greedy selection: the index of the largest logit per row (the first one on ties; NaN never wins).
#include <cmath>
#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Support Sampling::supports(const SampleRequest& r) const {
  if (!r.greedy) return Support::declined("only greedy selection is implemented on the cpu backend so far");
  return Support::native();
}

Status Sampling::argmax(const ArgmaxArgs& a) {
  SampleRequest r = describe(a);
  std::string req = r.describe();
  Support s = supports(r);
  if (!s.runs_natively()) return declined("cpu", req, s.constraint);
  KILN_RETURN_IF_ERROR(validate(a, DeviceKind::kHost, req));
  for (int64_t i = 0; i < r.rows; ++i) {
    const float* l = a.logits.data<float>() + i * a.logits.stride(0);
    int64_t best = 0;
    float best_v = -INFINITY;
    bool any = false;
    for (int64_t j = 0; j < r.vocab; ++j) {
      if (l[j] > best_v || (!any && l[j] == best_v)) {
        best_v = l[j];
        best = j;
        any = true;
      }
    }
    a.ids.data<int32_t>()[i] = static_cast<int32_t>(best);
  }
  return {};
}

}  // namespace kiln::cpu
