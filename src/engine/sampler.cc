#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace kiln {

namespace {
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void renormalise(std::vector<double>& probs) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  if (total > 0)
    for (double& p : probs) p /= total;
}

// Indices of the n largest entries of `v`, largest first (ties: lower index first).
template <typename T>
std::vector<int32_t> top_indices(const std::vector<T>& v, size_t n) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(n);
  return idx;
}

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
  if (p.top_logprobs < 0 || p.top_logprobs > 20) return bad("top_logprobs", "in [0, 20]", p.top_logprobs);
  return {};
}

void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> seen,
                     std::span<const int32_t> generated) {
  const auto V = static_cast<int32_t>(logits.size());
  if (p.repetition_penalty != 1.f) {
    std::vector<bool> done(logits.size(), false);
    for (int32_t t : seen) {
      if (t < 0 || t >= V || done[t]) continue;
      done[t] = true;
      logits[t] = logits[t] > 0 ? logits[t] / p.repetition_penalty : logits[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.f || p.frequency_penalty != 0.f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : generated)
      if (t >= 0 && t < V) ++counts[t];
    for (auto [t, n] : counts) logits[t] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(n);
  }
}

void apply_temperature(std::span<float> logits, float temperature) {
  for (float& l : logits) l /= temperature;
}

void apply_top_k(std::span<float> logits, int32_t k) {
  if (k <= 0 || static_cast<size_t>(k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
  const float kth = sorted[static_cast<size_t>(k - 1)];
  for (float& l : logits)
    if (l < kth) l = kNegInf;
}

std::vector<double> softmax(std::span<const float> logits) {
  const float m = *std::max_element(logits.begin(), logits.end());
  std::vector<double> p(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) p[i] = std::exp(static_cast<double>(logits[i]) - m);
  renormalise(p);
  return p;
}

void apply_min_p(std::vector<double>& probs, float min_p) {
  if (min_p <= 0.f) return;
  const double cut = min_p * *std::max_element(probs.begin(), probs.end());
  for (double& p : probs)
    if (p < cut) p = 0;
  renormalise(probs);
}

void apply_top_p(std::vector<double>& probs, float top_p) {
  if (top_p >= 1.f) return;
  std::vector<int32_t> order = top_indices(probs, probs.size());
  // top_p arrives as a float (0.8f is 0.80000001): a mass within float rounding of it reaches it.
  const double target = static_cast<double>(top_p) - 1e-6;
  double mass = 0;
  size_t keep = 0;
  while (keep < order.size() && (keep == 0 || mass < target)) mass += probs[order[keep++]];
  for (size_t i = keep; i < order.size(); ++i) probs[order[i]] = 0;
  renormalise(probs);
}

int32_t draw(const std::vector<double>& probs, double u) {
  double cum = 0;
  int32_t last = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0) continue;
    last = static_cast<int32_t>(i);
    cum += probs[i];
    if (u < cum) return last;
  }
  return last;  // u beyond the rounded total: the last token with mass
}

SampledToken Sampler::sample(std::span<const float> logits_in, std::span<const int32_t> seen,
                             std::span<const int32_t> generated) {
  std::vector<float> logits(logits_in.begin(), logits_in.end());
  apply_penalties(logits, params_, seen, generated);
  SampledToken out;
  std::vector<double> probs;
  if (params_.temperature == 0.f) {
    out.token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    // The softmax over a 250k vocabulary costs more than the argmax: only when asked for.
    if (!params_.logprobs && params_.top_logprobs == 0) return out;
    probs = softmax(logits);
  } else {
    apply_temperature(logits, params_.temperature);
    apply_top_k(logits, params_.top_k);
    probs = softmax(logits);
    apply_min_p(probs, params_.min_p);
    apply_top_p(probs, params_.top_p);
    // 53 random bits: a uniform double in [0, 1) that does not depend on the standard library.
    const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
    out.token = draw(probs, u);
  }
  out.logprob = static_cast<float>(std::log(probs[static_cast<size_t>(out.token)]));
  out.top = top_logprobs(probs, params_.top_logprobs);
  return out;
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
