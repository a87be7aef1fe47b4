// The fused GDN decode step (docs/model.md, "Decode: the fused step"): per row and key head, one
// block does the conv update of its q, k and v channels, the l2 norm of q and k, the gates, the
// recurrence of the key head's value heads (their f32 states in shared memory, fetched with
// asynchronous copies while the conv runs) and the gated RMSNorm of each value head's output. A
// block owns every channel it reads, so the conv state needs no ordering between blocks. Equal to
// causal_conv1d + gated_delta_rule (recurrent) + rms_norm (kGated) in turn.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

struct GdnDecodeParams {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
  int64_t conv_kernel = 0, channels = 0;  // channels = 2 * k_heads * dk + v_heads * dv
  int64_t slots = 0, conv_slots = 0;
  Rows<const float> mixed;  // [tokens, channels]
  Rows<const float> conv_weight;  // [channels, conv_kernel]
  float* conv_state = nullptr;  // [conv_slots, conv_kernel - 1, channels], contiguous
  Heads<const float> z;  // [tokens, v_heads, dv]
  Rows<const float> a;  // [tokens, v_heads]
  Rows<const float> b;
  const float* a_log = nullptr;    // [v_heads]
  const float* dt_bias = nullptr;  // [v_heads]
  float* state = nullptr;          // [slots, v_heads, dk, dv], contiguous
  const float* norm_weight = nullptr;  // [dv]
  float eps = 1e-6f;
  Heads<float> out;  // [tokens, v_heads, dv]
  const int32_t* cu_seqlens = nullptr;   // [rows + 1]
  const int32_t* state_slots = nullptr;  // [rows]; a slot outside either pool skips the row
};

// Shared memory of one block (the key head's value-head states plus vectors).
size_t gdn_decode_smem_bytes(int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv);
Status gdn_decode(const GdnDecodeParams& p, cudaStream_t stream);

// The same step split in two kernels for batches of one token a row. A block per (row, key head)
// updates the conv channels of the key head (q, k and its value heads' v), normalises q and k and
// computes the value heads' gates, into `vec` (gdn_decode_vectors_floats of f32 scratch). Then a
// persistent state kernel takes the (row, value head) items, several a block: each item's state
// is copied into shared memory `stages` items ahead (1..3; with 1, three blocks an SM and no
// copy ahead), so the state traffic streams while earlier items are computed; the recurrence and
// the gated norm read it there and write the new state back (fewer stages where the target's
// shared memory holds fewer states). Applies where dk is 16, 32, 64 or 128, dv a multiple of 8 up
// to 128 and one stage fits the target; gdn_decode_split also needs the state 16-byte aligned.
// The state kernel's grid is at most the blocks the device holds at once (kernels/occupancy.h).
bool gdn_decode_split_applies(int64_t dk, int64_t dv);
size_t gdn_decode_vectors_floats(int64_t rows, int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv);
Status gdn_decode_split(const GdnDecodeParams& p, float* vec, int stages, cudaStream_t stream);

}  // namespace kiln::cuda
