// Depthwise causal conv1d followed by silu, continuing from each sequence's last K-1 inputs
// (zeros at the start of a sequence) and leaving the new last K-1 inputs in its state slot.
#include <cmath>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "backend/cpu/layout_view.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

Support Conv::supports(const ConvRequest& r) const {
  if (r.kernel < 2) return Support::declined("kernel must be at least 2");
  return Support::native();
}

Status Conv::causal_conv1d(const ConvArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const ConvRequest r = describe(a);
  const LayoutView lv(a.layout);
  KILN_RETURN_IF_ERROR(lv.check_state_slots(a.state.dim(0), req));
  const int64_t C = r.channels, K = r.kernel;
  const float* w = a.weight.data<float>();
  default_thread_pool().parallel_for(r.rows * C, 64, [&](int64_t i0, int64_t i1, int) {
    std::vector<float> window;
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t row = i / C, c = i % C;
      float* st = a.state.data<float>() + lv.slots[row] * a.state.stride(0) + c;  // stride C between taps
      const int64_t n = lv.row_len(row), t0 = lv.row_begin(row);
      // window = the K-1 state inputs followed by this row's n inputs, for channel c.
      window.resize(static_cast<size_t>(K - 1 + n));
      for (int64_t j = 0; j < K - 1; ++j) window[j] = st[j * C];
      for (int64_t j = 0; j < n; ++j) window[K - 1 + j] = a.x.data<float>()[(t0 + j) * a.x.stride(0) + c];
      const float* wc = w + c * a.weight.stride(0);
      for (int64_t j = 0; j < n; ++j) {
        float acc = 0.f;
        for (int64_t k = 0; k < K; ++k) acc += wc[k] * window[j + k];
        a.out.data<float>()[(t0 + j) * a.out.stride(0) + c] = acc / (1.f + std::exp(-acc));
      }
      for (int64_t j = 0; j < K - 1; ++j) st[j * C] = window[n + j];
    }
  });
  return {};
}

}  // namespace kiln::cpu
