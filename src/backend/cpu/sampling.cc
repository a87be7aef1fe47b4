// Greedy selection: the index of the largest logit per row (the first one on ties; NaN never wins),
// among the ids a row's mask allows where it has one.
#include <cmath>
#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"

namespace kiln::cpu {

Support Sampling::supports(const SampleRequest& r) const { return Support::native(); }

Status Sampling::argmax(const ArgmaxArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const SampleRequest r = describe(a);
  for (int64_t i = 0; i < r.rows; ++i) {
    const float* l = a.logits.data<float>() + i * a.logits.stride(0);
    const uint32_t* allowed = a.allowed.empty() ? nullptr : a.allowed[static_cast<size_t>(i)];
    int64_t best = 0;
    float best_v = -INFINITY;
    bool any = false;
    for (int64_t j = 0; j < r.vocab; ++j) {
      if (allowed != nullptr && !((allowed[j >> 5] >> (j & 31)) & 1u)) continue;
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
