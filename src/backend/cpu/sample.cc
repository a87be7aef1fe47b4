// The reference `sample`: each row through the transforms of backend/sampling_math.h, exactly as
// the engine's Sampler runs them, with the row's own u.
#include <cmath>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/cpu/cpu_facets.h"
#include "backend/sampling_math.h"

namespace kiln::cpu {

Status Sampling::sample(const SampleArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, check_call(*this, a, "cpu", DeviceKind::kHost));
  const int64_t V = a.logits.dim(1);
  std::vector<float> logits(static_cast<size_t>(V));
  for (size_t i = 0; i < a.rows.size(); ++i) {
    const SampleRow& r = a.rows[i];
    const float* row = a.logits.data<float>() + static_cast<int64_t>(i) * a.logits.stride(0);
    logits.assign(row, row + V);
    apply_bias_and_mask(logits, r.bias, r.allowed);
    SamplingParams p;
    p.temperature = r.temperature;
    p.top_k = r.top_k;
    p.top_p = r.top_p;
    p.min_p = r.min_p;
    p.repetition_penalty = r.repetition_penalty;
    p.presence_penalty = r.presence_penalty;
    p.frequency_penalty = r.frequency_penalty;
    apply_penalties(logits, p, r.seen, r.generated);
    const RowPick pick = pick_token(logits, p, r.u, true);
    a.ids.data<int32_t>()[i] = pick.token;
    a.logprobs.data<float>()[i] = static_cast<float>(std::log(pick.probs[static_cast<size_t>(pick.token)]));
    const std::vector<int32_t> top = top_indices(pick.probs, static_cast<size_t>(r.top_logprobs));
    for (size_t k = 0; k < top.size(); ++k) {
      const int64_t at = static_cast<int64_t>(i) * a.top_ids.dim(1) + static_cast<int64_t>(k);
      a.top_ids.data<int32_t>()[at] = top[k];
      a.top_logprobs.data<float>()[at] = static_cast<float>(std::log(pick.probs[static_cast<size_t>(top[k])]));
    }
  }
  return {};
}

}  // namespace kiln::cpu
