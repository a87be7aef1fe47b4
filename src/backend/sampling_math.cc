#include "backend/sampling_math.h"

#include <algorithm>
#include <cmath>
#include <functional>
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
}  // namespace

std::vector<int32_t> top_indices(const std::vector<double>& v, size_t n) {
  std::vector<int32_t> idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  n = std::min(n, idx.size());
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(n), idx.end(),
                    [&](int32_t a, int32_t b) { return v[a] > v[b] || (v[a] == v[b] && a < b); });
  idx.resize(n);
  return idx;
}

void apply_bias_and_mask(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias,
                         const uint32_t* allowed) {
  for (const auto& [id, b] : bias) logits[static_cast<size_t>(id)] += b;
  if (allowed == nullptr) return;
  for (size_t id = 0; id < logits.size(); ++id)
    if (!((allowed[id >> 5] >> (id & 31)) & 1u)) logits[id] = kNegInf;
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
    // One rounding for frequency * n + presence (what the compiler contracted this to anyway), made
    // explicit so that a device kernel can compute the same float.
    for (auto [t, n] : counts) logits[t] -= std::fma(p.frequency_penalty, static_cast<float>(n), p.presence_penalty);
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

std::vector<double> sampled_distribution(std::span<float> logits, const SamplingParams& p) {
  apply_temperature(logits, p.temperature);
  apply_top_k(logits, p.top_k);
  std::vector<double> probs = softmax(logits);
  apply_min_p(probs, p.min_p);
  apply_top_p(probs, p.top_p);
  return probs;
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

RowPick pick_token(std::span<float> logits, const SamplingParams& p, double u, bool want_probs) {
  RowPick out;
  if (p.temperature == 0.f) {
    out.token = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    // The softmax over a 250k vocabulary costs more than the argmax: only when asked for.
    if (want_probs) out.probs = softmax(logits);
  } else {
    out.probs = sampled_distribution(logits, p);
    out.token = draw(out.probs, u);
  }
  return out;
}

}  // namespace kiln
