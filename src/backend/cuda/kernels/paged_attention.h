// Causal GQA attention of new query tokens over paged K/V caches that already hold them, with the
// output gate (out *= sigmoid(gate)) fused. The simple form: one block per (token, query head),
// an online softmax over the token's keys, f32 throughout. Serves prefill and decode alike; the
// flash-attention prefill and split-K decode kernels are future work (docs/cuda.md).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

constexpr int kAttentionMaxHeadDim = 512;

struct PagedAttentionParams {
  int64_t rows = 0, tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  int64_t block_size = 0, max_blocks = 0, cache_blocks = 0;
  const float* q = nullptr; int64_t q_token_stride = 0, q_head_stride = 0;
  const float* gate = nullptr; int64_t gate_token_stride = 0, gate_head_stride = 0;  // null: no gate
  float* out = nullptr; int64_t out_token_stride = 0, out_head_stride = 0;
  const float* k_cache = nullptr;  // [cache_blocks * block_size, kv_heads, head_dim]
  const float* v_cache = nullptr;
  const int32_t* cu_seqlens = nullptr;    // [rows + 1]
  const int32_t* kv_lens = nullptr;       // [rows]
  const int32_t* block_tables = nullptr;  // [rows, max_blocks]
  float scale = 1.f;
};

Status paged_attention(const PagedAttentionParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
