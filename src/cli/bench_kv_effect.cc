#include "cli/bench_kv_effect.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace kiln::cli {

namespace {

// The logits of a prompt and of each of `steps` decode steps with K/V in kv (host f32 rows).
// tokens: the decode inputs; empty: each step's input is the previous step's argmax, appended.
Result<std::vector<Tensor>> run_with_kv(Qwen35Model& model, DType kv, std::span<const int32_t> prompt, int64_t steps,
                                        std::vector<int32_t>& tokens) {
  KILN_RETURN_IF_ERROR(model.set_kv_dtype(kv));
  KILN_ASSIGN_OR_RETURN(ModelState state, model.create_state({1, (static_cast<int64_t>(prompt.size()) + steps + 63) / 64}));
  KILN_ASSIGN_OR_RETURN(SequenceState seq, state.new_sequence());
  const bool follow = tokens.empty();
  std::vector<Tensor> out;
  SequenceInput row{&seq, prompt};
  for (int64_t i = 0; i <= steps; ++i) {
    KILN_ASSIGN_OR_RETURN(Tensor logits, model.forward({&row, 1}, LogitsMode::kLast, state));
    if (i == steps) break;
    if (follow) {
      const float* l = logits.data<float>();
      tokens.push_back(static_cast<int32_t>(std::max_element(l, l + logits.numel()) - l));
    }
    out.push_back(std::move(logits));
    row = SequenceInput{&seq, {&tokens[static_cast<size_t>(i)], 1}};
  }
  state.release(seq);
  return out;
}

}  // namespace

Result<nlohmann::json> bench_kv_effect(Qwen35Model& model, DType reference, int64_t prompt_tokens, int64_t steps) {
  const DType kv = model.kv_dtype();
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_tokens));
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>((i * 7919 + 101) % vocab);
  std::vector<int32_t> tokens;
  auto narrow = run_with_kv(model, kv, prompt, steps, tokens);
  std::vector<Tensor> wide;
  if (narrow.ok()) {
    auto r = run_with_kv(model, reference, prompt, steps, tokens);
    if (r.ok()) wide = std::move(*r);
    else narrow = r.status();
  }
  KILN_RETURN_IF_ERROR(model.set_kv_dtype(kv));  // the caller's choice stays, whatever happened
  if (!narrow.ok()) return narrow.status();
  double worst = 0, abs_sum = 0;
  int64_t agree = 0;
  for (size_t s = 0; s < wide.size(); ++s) {
    const float* a = (*narrow)[s].data<float>();
    const float* b = wide[s].data<float>();
    double diff = 0, scale = 0;
    for (int64_t v = 0; v < vocab; ++v) {
      const double d = std::fabs(double(a[v]) - double(b[v]));
      diff = std::max(diff, d);
      abs_sum += d;
      scale = std::max(scale, std::fabs(double(b[v])));
    }
    worst = std::max(worst, diff / std::max(scale, 1e-30));
    agree += std::max_element(b, b + vocab) - b == tokens[s];  // tokens[s]: the narrow run's argmax
  }
  const double n = static_cast<double>(wide.size());
  return nlohmann::json{{"kv_dtype", std::string(dtype_name(kv))},
                        {"reference_kv_dtype", std::string(dtype_name(reference))},
                        {"prompt_tokens", prompt_tokens},
                        {"steps", steps},
                        {"max_rel_error", worst},
                        {"mean_abs_error", abs_sum / (n * static_cast<double>(vocab))},
                        {"argmax_agreement", static_cast<double>(agree) / n}};
}

}  // namespace kiln::cli
