// The gated delta rule, recurrent form: one block per (value head, row), the head's f32 state
// S [dk, dv] held in shared memory, the row's tokens taken in order (l2 norm of q and k, gates,
// S' = exp(g) S; S = S' + k (beta (v - S'^T k))^T; o = S^T q). Serves decode and, for now,
// prefill; the chunked (WY/UT) prefill kernel is future work (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

struct GatedDeltaRuleParams {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0, slots = 0;
  const float* q = nullptr; int64_t q_token_stride = 0, q_head_stride = 0;
  const float* k = nullptr; int64_t k_token_stride = 0, k_head_stride = 0;
  const float* v = nullptr; int64_t v_token_stride = 0, v_head_stride = 0;
  const float* a = nullptr; int64_t a_stride = 0;  // [tokens, v_heads]
  const float* b = nullptr; int64_t b_stride = 0;
  const float* a_log = nullptr;    // [v_heads]
  const float* dt_bias = nullptr;  // [v_heads]
  float* state = nullptr;          // [slots, v_heads, dk, dv], contiguous
  float* out = nullptr; int64_t out_token_stride = 0, out_head_stride = 0;
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; slots outside [0, slots) are skipped
};

// Shared memory the kernel needs for (dk, dv); the facet declines what the device cannot hold.
size_t gated_delta_rule_smem_bytes(int64_t dk, int64_t dv);
Status gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
