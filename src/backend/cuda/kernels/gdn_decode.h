// The fused GDN decode step (spec/engine.md, "Decode fast path"): per row and key head, one block
// does the conv update of its q, k and v channels, the l2 norm of q and k, the gates, the
// recurrence of the key head's value heads (their f32 states in shared memory, fetched with
// asynchronous copies while the conv runs) and the gated RMSNorm of each value head's output.
// A block owns every channel it reads, so the conv state needs no ordering between blocks.
// Equal to causal_conv1d + gated_delta_rule (recurrent) + rms_norm (kGated) in turn.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

struct GdnDecodeParams {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
  int64_t conv_kernel = 0, channels = 0;  // channels = 2 * k_heads * dk + v_heads * dv
  int64_t slots = 0, conv_slots = 0;
  const float* mixed = nullptr; int64_t mixed_stride = 0;            // [tokens, channels]
  const float* conv_weight = nullptr; int64_t conv_weight_stride = 0;  // [channels, conv_kernel]
  float* conv_state = nullptr;  // [conv_slots, conv_kernel - 1, channels], contiguous
  const float* z = nullptr; int64_t z_token_stride = 0, z_head_stride = 0;  // [tokens, v_heads, dv]
  const float* a = nullptr; int64_t a_stride = 0;  // [tokens, v_heads]
  const float* b = nullptr; int64_t b_stride = 0;
  const float* a_log = nullptr;    // [v_heads]
  const float* dt_bias = nullptr;  // [v_heads]
  float* state = nullptr;          // [slots, v_heads, dk, dv], contiguous
  const float* norm_weight = nullptr;  // [dv]
  float eps = 1e-6f;
  float* out = nullptr; int64_t out_token_stride = 0, out_head_stride = 0;  // [tokens, v_heads, dv]
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; a slot outside either pool skips the row
};

// Shared memory of one block (the key head's value-head states plus vectors).
size_t gdn_decode_smem_bytes(int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv);
Status gdn_decode(const GdnDecodeParams& p, cudaStream_t stream);

// The same step split in two kernels for batches of one token a row: a block per (row, key head)
// updates the q/k conv channels and writes the normalised q, k to `qk` ([rows, k_heads, 2, dk]
// f32, scratch), then a block per (row, value head) keeps that head's state in registers (four
// threads a column) and does the v conv, the recurrence and the gated norm. Many small blocks
// instead of one shared-memory-sized block per key head: at tens of rows the state traffic
// overlaps with compute across blocks.
// `staged`: the state kernel copies the head's state into shared memory first (where the state
// is 16-byte aligned) instead of holding it in registers.
bool gdn_decode_split_applies(int64_t dk, int64_t dv);
// col_splits: blocks a value head's state is split over by columns (1 or 2; 2 where dv % 64 == 0,
// else 1), the blocks of a head a cluster.
Status gdn_decode_split(const GdnDecodeParams& p, float* qk, cudaStream_t stream, bool staged, int col_splits);

}  // namespace kiln::cuda
