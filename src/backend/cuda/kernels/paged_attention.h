// Causal GQA attention of new query tokens over paged K/V caches that already hold them, with the
// output gate (out *= sigmoid(gate)) fused, f32 arithmetic over an f32 or bf16 cache (kv_elem.cuh). Two kernels:
//   paged_attention (paged_attention.cu): the simple form, one block per (token, query head),
//     an online softmax over the token's keys; any head_dim up to 512, any group.
//   paged_attention_split (paged_attention_split.cu): a warp per stream of keys serving all the
//     query heads of a KV head at once; decode splits the keys over blocks (merged by a second
//     kernel), prefill gives each warp one token of a block of 8 that share tiles of 32 keys
//     staged in shared memory, with the keys split in 128s over blocks (merged the same way). head_dim 32 * {1, 2, 4, 8, 16}, groups of 1, 2, 4 or 8 query
//     heads with group * head_dim <= 1024.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int kAttentionMaxHeadDim = 512;

struct PagedAttentionParams {
  int64_t rows = 0, tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t block_size = 0, max_blocks = 0, cache_blocks = 0;
  Heads<const float> q;
  Heads<const float> gate;  // null: no gate
  Heads<float> out;
  const void* k_cache = nullptr;  // [cache_blocks * block_size, kv_heads, head_dim]
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kF32;  // f32, bf16 or f8e4m3 (kv_elem.cuh)
  const int32_t* cu_seqlens = nullptr;    // [rows + 1]
  const int32_t* kv_lens = nullptr;       // [rows]
  const int32_t* block_tables = nullptr;  // [rows, max_blocks]
  float scale = 1.f;
};

Status paged_attention(const PagedAttentionParams& p, cudaStream_t stream);

constexpr int kAttentionMaxSplits = 64;

// How paged_attention_split divides the work, and its scratch (splits > 1 only).
struct AttentionSplit {
  int64_t prefill_tiles = 0;  // prefill mode: blocks of 8 tokens per row (0: decode mode)
  int64_t splits = 1, keys_per_split = 0;
  int64_t blocks = 0;        // paged_decode_mma: its persistent grid
  // Decode mode: lanes over keys (attention_key_groups_kernel) where attention_key_groups_apply,
  // else lanes over dims. Which is faster depends on the rows (lanes over dims won at 32-64 rows
  // of 1,056 keys, lost elsewhere): the facet times the two per shape (kernel_timing.h).
  bool key_groups = true;
  float* part_o = nullptr;   // [tokens, q_heads, splits, head_dim]
  float* part_ml = nullptr;  // [tokens, q_heads, splits, 2]: running max and sum
};

bool paged_attention_split_applies(int64_t head_dim, int64_t group);
// Whether a decode split may run lanes over keys: a key row is whole 16-byte pieces for 8 lanes.
bool attention_key_groups_apply(int64_t head_dim, DType kv_dtype);
// Decode: enough key splits to give the device ~2 blocks per multiprocessor, at least 64 keys
// each. Prefill: the tiled kernel over the longest row's tokens, keys split in 128s.
AttentionSplit plan_attention_split(int64_t tokens, int64_t kv_heads, int64_t max_q_len, int64_t max_kv_len, bool decode,
                                    int sms);
Status paged_attention_split(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream);
// Merges the splits' partials into the gated output (a no-op for one split).
Status attention_combine(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream);

// Decode on tensor cores (paged_decode_mma.cu), for a bf16 cache where the request allows bf16
// products (AttentionArgs::compute): q and P are rounded to bf16, scores and sums stay f32. Each
// warp of a persistent grid takes units (token, KV head, split of the keys) in turn, streaming
// their tiles of 16 keys through shared memory (cp.async, two tiles ahead, across units), and
// computes S^T = K q^T and O^T += V^T P^T with mma.sync m16n8k16, the group's query heads as the
// 8 columns (up to 8 heads); a unit's result is the gated output (one split) or its partial for
// attention_combine. head_dim 64, 128 or 256, where two stages fit the target's shared memory
// (132 KB at 256: not on the 99 KB GPUs).
bool paged_decode_mma_applies(int64_t head_dim, int64_t group, DType kv_dtype);
// The grid is one block of 4 warps an SM; each token's keys split (evenly, in tiles of 16, by the
// kernel) so that the units come to about `units_per_warp` a warp, at most kAttentionMaxSplits
// splits. keys_per_split is unused: the plan does not depend on the longest row, so a replayed
// step and an eager one run the same units.
AttentionSplit plan_decode_mma(int64_t tokens, int64_t kv_heads, int sms, int units_per_warp);
Status paged_decode_mma(const PagedAttentionParams& p, const AttentionSplit& s, cudaStream_t stream);

}  // namespace kiln::cuda
