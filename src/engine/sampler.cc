#include "engine/sampler.h"

#include <algorithm>
#include <cmath>

namespace kiln {

namespace {
std::vector<TokenLogprob> top_logprobs(const std::vector<double>& probs, int32_t n) {
  std::vector<TokenLogprob> out;
  for (int32_t t : top_indices(probs, static_cast<size_t>(std::max(n, 0))))
    out.push_back({t, static_cast<float>(std::log(probs[t]))});
  return out;
}
}  // namespace

Status validate(const SamplingParams& p) {
  auto bad = [](const char* field, const std::string& rule, double v) {
    return invalid_argument(std::string(field) + " must be " + rule + ", got " + std::to_string(v));
  };
  if (!(p.temperature >= 0.f) || !std::isfinite(p.temperature)) return bad("temperature", ">= 0", p.temperature);
  if (p.top_k < 0) return bad("top_k", ">= 0 (0 disables it)", p.top_k);
  if (!(p.top_p > 0.f && p.top_p <= 1.f)) return bad("top_p", "in (0, 1]", p.top_p);
  if (!(p.min_p >= 0.f && p.min_p <= 1.f)) return bad("min_p", "in [0, 1]", p.min_p);
  if (!(p.repetition_penalty > 0.f) || !std::isfinite(p.repetition_penalty))
    return bad("repetition_penalty", "> 0", p.repetition_penalty);
  if (!(p.presence_penalty >= -2.f && p.presence_penalty <= 2.f)) return bad("presence_penalty", "in [-2, 2]", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.f && p.frequency_penalty <= 2.f))
    return bad("frequency_penalty", "in [-2, 2]", p.frequency_penalty);
  if (p.top_logprobs < 0 || p.top_logprobs > kMaxTopLogprobs) return bad("top_logprobs", "in [0, 20]", p.top_logprobs);
  return {};
}

SampledToken Sampler::sample(std::span<const float> logits_in, std::span<const int32_t> seen,
                             std::span<const int32_t> generated) {
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  apply_penalties(logits, params_, seen, generated);
  const RowPick pick = pick_token(logits, params_, step_u(), wants_logprobs(params_));
  SampledToken out;
  out.token = pick.token;
  if (pick.probs.empty()) return out;
  out.logprob = static_cast<float>(std::log(pick.probs[static_cast<size_t>(out.token)]));
  out.top = top_logprobs(pick.probs, params_.top_logprobs);
  return out;
}

SampleRow Sampler::sample_row(std::span<const int32_t> seen, std::span<const int32_t> generated) {
  SampleRow r;
  r.temperature = params_.temperature;
  r.top_p = params_.top_p;
  r.min_p = params_.min_p;
  r.top_k = params_.top_k;
  r.repetition_penalty = params_.repetition_penalty;
  r.presence_penalty = params_.presence_penalty;
  r.frequency_penalty = params_.frequency_penalty;
  r.top_logprobs = params_.top_logprobs;
  r.u = step_u();
  r.seen = seen;
  r.generated = generated;
  return r;
}

SampledToken score_token(std::span<const float> logits, int32_t token, int32_t top) {
  SampledToken out;
  out.token = token;
  const std::vector<double> probs = softmax(logits);
  out.logprob = static_cast<float>(std::log(probs[static_cast<size_t>(token)]));
  out.top = top_logprobs(probs, top);
  return out;
}

}  // namespace kiln
