// Causal GQA flash attention for prefill rows on tensor cores, over the paged f32 K/V cache, with
// the output gate (out *= sigmoid(gate)) fused. A block takes 128 consecutive query tokens of one
// row and one query head (64 where shared memory is smaller than sm_90's), a warp per 16 of them;
// tiles of 64 keys (32) of K and V are converted to bf16 as they are staged in shared memory,
// S = Q K^T and O += P V run as bf16 mma.sync with f32 accumulation, and the softmax is online in
// f32 (P rounded to bf16 for its product with V). So the result is the f32 attention of Q, K and
// V rounded to bf16, with P rounded too: callers opt in through AttentionArgs::compute = bf16.
// Key tiles past a block's last query are skipped.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

struct FlashPrefillParams {
  int64_t rows = 0, tokens = 0, max_q_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t block_size = 0, max_blocks = 0, cache_blocks = 0;
  Heads<const float> q;
  Heads<const float> gate;  // null: no gate
  Heads<float> out;
  const void* k_cache = nullptr;  // [cache_blocks * block_size, kv_heads, head_dim], 16-byte aligned
  const void* v_cache = nullptr;
  DType kv_dtype = DType::kF32;  // f32, bf16 or f8e4m3 (kv_elem.cuh)
  const int32_t* cu_seqlens = nullptr;    // [rows + 1]
  const int32_t* kv_lens = nullptr;       // [rows]: past + new tokens of each row
  const int32_t* block_tables = nullptr;  // [rows, max_blocks]
  float scale = 1.f;
  // Optional [tokens, q_heads] f32: each query's log-sum-exp of its scores, as max + log2(sum) in
  // units of S scale log2(e) (what flash_backward recomputes the probabilities from).
  float* lse = nullptr;
};

// The head_dims with a kernel instance (128 and 256) whose narrow tile fits the target's shared
// memory (device_target()).
bool flash_prefill_supports(int64_t head_dim);
// Whether the wide tile (128 query rows, 64-key tiles) fits the target; else the narrow one (64
// rows, 32-key tiles) runs.
bool flash_prefill_wide_tile(int64_t head_dim);
Status flash_prefill(const FlashPrefillParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
