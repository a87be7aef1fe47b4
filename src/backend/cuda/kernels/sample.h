// Sampling on the device: one block per row runs the sampler's transforms (docs/ARCHITECTURE.md,
// "The engine": penalties, temperature, top-k, softmax, min-p, top-p, draw) with the host
// reference's semantics (backend/sampling_math.h) and writes the token and the log of its final
// probability.
//   - structured output first: ids the row's mask disallows become -inf as the logits are read,
//     then its logit biases are added (-inf stays -inf: the host's bias-then-mask result).
//   - penalties: repetition over the distinct ids of `seen` (a shared-memory bitmap claims each
//     id once), presence/frequency over (id, count) pairs the host counted; float ops rounded as
//     the host rounds them (explicit _rn intrinsics; frequency * n + presence as one fma, as
//     sampling_math.cc writes it).
//   - top-k: the k-th largest logit by radix select over the order-preserving uint32 transform
//     (4 passes of 8-bit histograms); logits below it become -inf, ties at it stay.
//   - softmax in double (max, then exp(l - max) and their sum); min-p against the largest.
//   - top-p: the last kept probability by radix select over the uint64 bits of the (non-negative)
//     double probabilities with per-bin masses in 2^-62 fixed point (exact integer sums, so the
//     result does not depend on thread order); ties at it kept lowest index first up to the count
//     the target needs.
//   - draw: each thread owns a contiguous slice of the row; a block-wide prefix sum of the slice
//     masses gives each slice's start, and the first token (index order) with u < cumulative wins;
//     u beyond the total takes the last token with mass.
//   - greedy (temperature 0): the first index holding the largest penalised logit, its logprob
//     under their softmax; no temperature, top-k, min-p or top-p.
//   - top_n alternatives: n passes, each a block reduction to the next (probability, index) in
//     the host's order (larger first, then lower index) after the previous pass's.
// Tolerance against the host: its sums are sequential doubles, these are tree and fixed-point
// sums, so a draw whose u lies within ~1e-12 of an interval boundary, or a top-p target within
// ~1e-12 of a prefix mass, may pick the neighbouring token. Everything else is equal.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

// One row's parameters, as the host stages them (8-byte aligned: u first).
struct SampleRowParams {
  double u = 0;
  float temperature = 1.f, top_p = 1.f, min_p = 0.f;
  float repetition_penalty = 1.f, presence_penalty = 0.f, frequency_penalty = 0.f;
  int32_t top_k = 0;
  int32_t seen_offset = 0, seen_count = 0;  // into `seen`: token ids, duplicates allowed
  int32_t gen_offset = 0, gen_count = 0;    // into `generated`: (token, count) pairs, distinct tokens
  int32_t top_n = 0;                        // alternatives to report, <= the top_stride
  int32_t mask_offset = -1;                 // into `masks`: the row's (vocab + 31) / 32 words; -1 none
  int32_t bias_offset = 0, bias_count = 0;  // into `bias_ids` / `bias_values`: distinct ids
};

struct SampleParams {
  int64_t rows = 0, vocab = 0;
  Rows<const float> logits;
  const SampleRowParams* row_params = nullptr;  // [rows]
  const int32_t* seen = nullptr;                // flat ids
  const int32_t* generated = nullptr;           // flat (token, count) pairs
  const uint32_t* masks = nullptr;              // flat allowed-id bitmasks (bit id % 32 of word id / 32)
  const int32_t* bias_ids = nullptr;            // flat logit-bias ids
  const float* bias_values = nullptr;           // and their biases
  float* work = nullptr;                        // [rows, vocab] scratch
  double* probs = nullptr;                      // [rows, vocab] scratch
  int32_t* ids = nullptr;                       // [rows]
  float* logprobs = nullptr;                    // [rows]
  int32_t* top_ids = nullptr;                   // [rows, top_stride] where a row has top_n > 0
  float* top_logprobs = nullptr;                // [rows, top_stride]
  int64_t top_stride = 0;
};

// The dynamic shared memory one row needs (the penalty bitmap), and the most the kernel may use.
int64_t sample_shared_bytes(int64_t vocab);
int64_t sample_max_shared_bytes();

Status sample(const SampleParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
