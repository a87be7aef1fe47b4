// The sampler: turns one row of logits into a token, on the host, in the order of
// docs/ARCHITECTURE.md, "The engine" (penalties, temperature, top-k, softmax, min-p, top-p, seeded
// draw), through the transforms of backend/sampling_math.h; or hands a backend's `sample` the same
// request (sample_row), drawing u from the same generator so that a seed gives the same sequence of
// u whichever path runs.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "backend/facets.h"
#include "backend/sampling_math.h"
#include "core/status.h"

namespace kiln {

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
  // The next uniform double in [0, 1) of this request's generator (53 random bits, independent of
  // the standard library): what `sample` draws with at temperature > 0.
  double next_u() { return static_cast<double>(rng_() >> 11) * 0x1.0p-53; }
  // This step's request for a backend's `sample`: the parameters, the spans (which must outlive
  // the call) and this step's u, consumed as `sample` would consume it.
  SampleRow sample_row(std::span<const int32_t> seen, std::span<const int32_t> generated);

 private:
  // This step's u: the next one at temperature > 0; a greedy row draws nothing.
  double step_u() { return params_.temperature == 0.f ? 0.0 : next_u(); }

  SamplingParams params_;
  std::mt19937_64 rng_;
};

}  // namespace kiln
