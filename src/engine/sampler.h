// The sampler: turns one row of logits into a token, on the host, in the order of
// spec/engine.md (penalties, temperature, top-k, softmax, min-p, top-p, seeded draw). Each
// transform is a function of its own so that tests can check it against a direct computation.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"

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

// The first out-of-range field, named as the API names it.
Status validate(const SamplingParams& p);

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.f;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.f;             // of `token` under the distribution it was drawn from
  std::vector<TokenLogprob> top;   // the top_logprobs most likely tokens of that distribution
};

// The logprob of `token` under softmax(logits) (temperature 1, no penalties) and the `top` most
// likely alternatives: what a prompt token's score is (prompt_logprobs).
SampledToken score_token(std::span<const float> logits, int32_t token, int32_t top);

// ---- the transforms, in the order they apply ----
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
// The token whose cumulative-probability interval holds `u` in [0, 1).
int32_t draw(const std::vector<double>& probs, double u);

// A request's sampler: its parameters and its own seeded generator, so that the same seed gives
// the same tokens whatever else is in the batch.
class Sampler {
 public:
  Sampler(SamplingParams params, uint64_t seed) : params_(params), rng_(seed) {}
  // `seen` is prompt + generated (the repetition penalty's domain), `generated` its suffix.
  // Greedy (temperature 0) applies the penalties, takes the argmax, and (unless logprobs is off
  // and no alternatives are asked for) reports logprobs of the
  // penalised logits at temperature 1 (a point mass would report nothing useful).
  SampledToken sample(std::span<const float> logits, std::span<const int32_t> seen,
                      std::span<const int32_t> generated);
  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kiln
