// The sampling transforms (docs/ARCHITECTURE.md, "The engine"), on one host row of logits, in the
// order they apply (penalties, temperature, top-k, softmax, min-p, top-p, seeded draw). They live
// below the engine so that a backend's reference `sample` (cpu/sample.cc) runs exactly what the
// engine's Sampler runs; each is a function of its own so that tests can check it against a direct
// computation.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

namespace kiln {

struct SamplingParams {
  float temperature = 1.f;         // 0: greedy
  int32_t top_k = 0;               // 0: off
  float top_p = 1.f;               // (0, 1]
  float min_p = 0.f;               // [0, 1]
  float repetition_penalty = 1.f;  // > 0; over prompt and generated tokens
  float presence_penalty = 0.f;    // [-2, 2]; over generated tokens
  float frequency_penalty = 0.f;   // [-2, 2]; over generated tokens
  int32_t top_logprobs = 0;        // alternatives reported per token, [0, 20]
  bool logprobs = true;            // false: greedy skips the softmax and reports logprob 0
};

// Whether a greedy row reports logprobs (its softmax is computed only then); rows at
// temperature > 0 always have their distribution at hand.
inline bool wants_logprobs(const SamplingParams& p) { return p.logprobs || p.top_logprobs > 0; }

// A structured-output row, before every transform: logits[id] += bias for each (id, bias); then,
// where `allowed` (a bitmask over logits.size() ids, bit id % 32 of word id / 32) is given, every id
// whose bit is clear becomes -inf.
void apply_bias_and_mask(std::span<float> logits, std::span<const std::pair<int32_t, float>> bias,
                         const uint32_t* allowed);

// Repetition penalty over `seen` (divide positive logits, multiply negative ones, once per
// distinct token); presence (once per distinct token) and frequency (per occurrence) penalties
// over `generated`.
void apply_penalties(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> seen,
                     std::span<const int32_t> generated);
void apply_temperature(std::span<float> logits, float temperature);
// Keeps the k largest logits (and any tied with the k-th), the rest become -inf.
void apply_top_k(std::span<float> logits, int32_t k);
std::vector<double> softmax(std::span<const float> logits);
// Zeroes probabilities below min_p times the largest one and renormalises.
void apply_min_p(std::vector<double>& probs, float min_p);
// Keeps the most likely tokens until their mass reaches top_p (at least one) and renormalises.
void apply_top_p(std::vector<double>& probs, float top_p);
// What a row at temperature > 0 draws from, its penalties already applied: temperature, top-k,
// softmax, min-p, top-p (`logits` is changed in place).
std::vector<double> sampled_distribution(std::span<float> logits, const SamplingParams& p);
// The token whose cumulative-probability interval holds `u` in [0, 1).
int32_t draw(const std::vector<double>& probs, double u);

// One row, its penalties already applied (`logits` is changed in place): at temperature 0 the
// first largest logit, and softmax(logits) as its distribution where `want_probs`; else the token
// `u` draws from sampled_distribution. `probs` is what the token came from (empty: not computed).
struct RowPick {
  int32_t token = 0;
  std::vector<double> probs;
};
RowPick pick_token(std::span<float> logits, const SamplingParams& p, double u, bool want_probs);

// Indices of the n largest entries of `v`, largest first (ties: lower index first).
std::vector<int32_t> top_indices(const std::vector<double>& v, size_t n);

}  // namespace kiln
