// The two per-chunk steps of the fused linear log-probs (backend/cuda/training_logprobs.cc): the
// caller computes one vocabulary chunk's logits [tokens, n] with cuBLAS, then
//   logprob_chunk_forward folds them into each token's running (max, sum of exponentials) and
//     picks the target's logit, writing lse and logp after the last chunk;
//   logprob_chunk_grad turns them into G = coef * (onehot(target) - exp(logit - lse)), the
//     operand of dhidden += G W_chunk.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

struct LogprobChunkParams {
  int64_t tokens = 0, n = 0;          // logits rows, chunk width
  int64_t v0 = 0;                     // the vocabulary id of the chunk's first column
  const float* logits = nullptr;      // [tokens, n], contiguous
  const int32_t* targets = nullptr;   // [tokens]; < 0: no target
  float* run_max = nullptr;           // [tokens]: max over the chunks so far
  float* run_sum = nullptr;           // [tokens]: sum of exp(logit - run_max) over the chunks so far
  float* target_logit = nullptr;      // [tokens]: written by the chunk holding the target
  bool first = false;                 // ignore run_max / run_sum (no chunk before)
  bool last = false;                  // write lse and logp instead of the running state
  float* lse = nullptr;               // [tokens]
  float* logp = nullptr;              // [tokens]: logit[target] - lse, 0 where target < 0
};
Status logprob_chunk_forward(const LogprobChunkParams& p, cudaStream_t stream);

struct LogprobGradParams {
  int64_t tokens = 0, n = 0, v0 = 0;  // as in LogprobChunkParams
  const float* logits = nullptr;      // [tokens, n], contiguous
  const int32_t* targets = nullptr;   // [tokens]; < 0: a zero row
  const float* lse = nullptr;         // [tokens]
  const float* coef = nullptr;        // [tokens]
  void* g = nullptr;                  // [tokens, n], contiguous; may be `logits` itself when f32
  DType g_dtype = DType::kF32;        // f32 or bf16 (rounded to nearest even)
};
Status logprob_chunk_grad(const LogprobGradParams& p, cudaStream_t stream);

// dst[i] = src[i] widened from f16 to f32, i < count: an f16 LM head's chunk for the backward's
// f32 GEMM (an f16 G would flush small probabilities times small coefficients to zero).
Status widen_f16(const void* src, float* dst, int64_t count, cudaStream_t stream);

}  // namespace kiln::cuda
