// The gated delta rule over each row's tokens, continuing from and updating the row's f32 state.
// Recurrent form (gated_delta_rule.cu): one block per (value head, row), the head's state
// S [dk, dv] in shared memory, tokens in order (l2 norm of q and k, gates, S' = exp(g) S;
// S = S' + k (beta (v - S'^T k))^T; o = S^T q). Chunked form (gdn_chunked.cu): chunks of 64
// tokens solved at once in the WY/UT form, one block per (value head, 32 state columns, row).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

struct GatedDeltaRuleParams {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0, slots = 0;
  Heads<const float> q;
  Heads<const float> k;
  Heads<const float> v;
  Rows<const float> a;  // [tokens, v_heads]
  Rows<const float> b;
  const float* a_log = nullptr;    // [v_heads]
  const float* dt_bias = nullptr;  // [v_heads]
  float* state = nullptr;          // [slots, v_heads, dk, dv], contiguous
  Heads<float> out;
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; slots outside [0, slots) are skipped
  // The two-pass chunked form only: its scratch (gated_delta_rule_two_pass_scratch_floats: a
  // record per (row, chunk, value head), gdn_chunk_record.h) and the most chunks of 64 tokens
  // any row has.
  float* scratch = nullptr;
  int64_t max_chunks = 0;
  // The two-pass form, for the chunked backward: every row starts from a zero state and its final
  // state is not kept (state and state_slots unused); out may be null (not written); where set,
  // the scan keeps the state entering each chunk, chunk_states [rows, max_chunks, v_heads, dk, dv],
  // and each chunk's W = U - Wk S0, chunk_w [rows, max_chunks, v_heads, 64, dv].
  bool zero_state = false;
  float* chunk_states = nullptr;
  float* chunk_w = nullptr;
  // The two-pass form: every product in one tf32 pass (operands rounded to tf32, ~2^-11 relative)
  // instead of 3xTF32, where the caller allows reduced precision (GdnArgs::compute).
  bool tf32 = false;
  // The one-kernel form only: A and Mq of each block in global memory
  // (gated_delta_rule_chunked_lean_floats), where the target's shared memory cannot hold them
  // (gated_delta_rule_chunked_lean_smem_bytes); null: in shared memory.
  float* chunk_am = nullptr;
};

// Shared memory the kernel needs for (dk, dv); the facet declines what the device cannot hold.
size_t gated_delta_rule_smem_bytes(int64_t dk, int64_t dv);
Status gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream);

// The chunked form. With p.scratch set, two passes (dk 16..128): every chunk's state-independent
// part at once (normalised q, k; A; (I + A)^-1 applied to beta V and beta exp(G) K; the masked
// q.k products), then a scan over the chunks in order. Without, one kernel (dk 16..256) doing
// both per chunk, with the forward substitution in the scan.
size_t gated_delta_rule_chunked_smem_bytes(int64_t dk);  // one-kernel form; 0: no instance for dk
size_t gated_delta_rule_two_pass_smem_bytes(int64_t dk);  // 0: no instance for dk
size_t gated_delta_rule_chunked_lean_smem_bytes(int64_t dk);  // one-kernel form, A and Mq in chunk_am
size_t gated_delta_rule_chunked_lean_floats(int64_t rows, int64_t v_heads, int64_t dv);
size_t gated_delta_rule_two_pass_scratch_floats(int64_t rows, int64_t max_chunks, int64_t v_heads, int64_t dk,
                                                int64_t dv);
Status gated_delta_rule_chunked(const GatedDeltaRuleParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
