// The backward of the gated delta rule for training (TrainingFacet::gdn_backward): every row from
// a zero state, gradients of the raw q, k, v, a, b. Three kernels, in stream order:
//   prep    per (token, key head): the l2-normalised q (times 1/sqrt(dk)) and k; per (token,
//           value head): the decay exp(g) and beta, g = -exp(a_log) softplus(a + dt_bias).
//   state   per (row, value head, group of value columns): the columns of S evolve independently
//           (column j reads only v[:, j]), so a block owns some columns, their state and their
//           gradient dS. A forward pass keeps the state at chunk boundaries; the chunks are then
//           taken in reverse, their per-token states recomputed from the boundary and walked
//           backwards carrying dS. dv comes out whole; dq, dk (of the normalised q, k) and dg,
//           dbeta come out as partial sums over the block's columns. Two forms do this:
//             chunked (the default): the chunked (WY) form in place of the walk
//               (gdn_chunked_backward.h; dk 16, 32, 64 or 128): chunk records and states from the
//               two-pass forward, a reverse scan over the chunks for dS, then every chunk's
//               gradients at once, as products; dq, dk, dg, dbeta per value head (one group).
//             registers (where the chunked form's shared memory or dk does not fit): 32 columns a block
//               of 256 threads, 8 lanes a column each holding dk/8 rows of the column's state and
//               dS in registers (sums over dk: 3 shuffles; sums over the columns: shuffles within
//               the warp, then shared memory, one barrier a token); a chunk is recomputed 8 tokens
//               at a time (sub-chunk boundaries, then the 8 per-token states, lane-major in the
//               scratch), the 8 tokens' k, q, v, dout and gates staged in shared memory.
//   finish  per (token, key head): the partials of the value heads (and column groups) sharing
//           the key head summed, through the l2 norms to the raw q, k; da, db from dg, dbeta.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

enum class GdnBackwardKernel : uint8_t { kRegisters, kChunked };

struct GdnBackwardParams {
  int64_t rows = 0, tokens = 0, k_heads = 0, v_heads = 0, dk = 0, dv = 0;
  int64_t chunk = 64;    // tokens between kept states (no larger than max_len)
  int64_t max_len = 0;   // the longest row; a row longer than this is skipped (its scratch is sized by it)
  Heads<const float> q;  // [tokens, k_heads, dk]
  Heads<const float> k;  // [tokens, k_heads, dk]
  Heads<const float> v;  // [tokens, v_heads, dv]
  Rows<const float> a;  // [tokens, v_heads]
  Rows<const float> b;  // [tokens, v_heads]
  const float* a_log = nullptr;                                             // [v_heads]
  const float* dt_bias = nullptr;                                           // [v_heads]
  Heads<const float> dout;  // [tokens, v_heads, dv]
  Heads<float> dq;  // shaped as q
  Heads<float> dk_out;  // shaped as k
  Heads<float> dv_out;  // shaped as v
  Rows<float> da;  // [tokens, v_heads]
  Rows<float> db;  // [tokens, v_heads]
  const int32_t* cu_seqlens = nullptr;                                      // [rows + 1], on the device

  // Which form: the chunked one (gdn_chunked_backward.h; dk 16, 32, 64 or 128, as the two-pass
  // forward: the plan gives other dk the walk) or the register-tile walk (a column's state split
  // over 8 lanes, 32 columns a block).
  GdnBackwardKernel kernel = GdnBackwardKernel::kChunked;
  // The chunked form: what the two-pass forward kept of these inputs from a zero state
  // (gdn_forward_kept(rows, ceil(max_len / 64), v_heads, dk, dv) floats, gdn_chunk_record.h), or
  // null to recompute it. The walk ignores it.
  const float* kept = nullptr;
  // The chunked form's gradient pass: its products in one tf32 pass (operands rounded to tf32,
  // ~5e-4 relative error in the gradients against 3e-7) instead of 3xTF32.
  bool tf32 = false;

  // The plan (gdn_backward_plan): value columns per block, how many groups of them per head, and
  // the state kernel's grid (blocks loop over the (row, head, group) items; the scratch is per block);
  // for the register kernel, the state rows a lane holds (8 of them cover dk, padded). The chunked
  // form: one group of all dv columns, no state blocks.
  int64_t cols = 0, groups = 0, state_blocks = 0, rows_per_lane = 0;
  float* scratch = nullptr;  // gdn_backward_scratch_floats(*this) floats
};

// The form's name.
const char* gdn_backward_kernel_name(GdnBackwardKernel k);

// The largest dk the kernels take (the finish kernel's per-lane registers).
constexpr int64_t kGdnBackwardMaxDk = 256;

// Fills cols, groups, state_blocks (the walk: blocks to fill `sm_count` multiprocessors, no more
// resident blocks than the device holds at once). The chunked form gives way to the walk where its
// block exceeds `smem_optin` bytes of shared memory; fails where the walk's does too.
Status gdn_backward_plan(GdnBackwardParams& p, int sm_count, size_t smem_optin);

// Scratch floats for a planned call: normalised q, k; decays and betas; the partial dq, dk, dg,
// dbeta; and, per state block, the kept chunk-boundary states and one chunk's per-token states.
size_t gdn_backward_scratch_floats(const GdnBackwardParams& p);

Status gdn_backward(const GdnBackwardParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
