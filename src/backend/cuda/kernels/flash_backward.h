// The backward of causal GQA attention with the fused output gate on tensor cores (flash form):
// nothing of size tokens^2 is kept. It starts from what the forward (flash_prefill, with
// FlashPrefillParams::lse) left: the gated output Y and each query's log-sum-exp, so a tile of
// probabilities is recomputed as P = exp2(S scale log2(e) - lse) without a softmax pass. Three
// launches:
//   prep  per (token, head): Q, K, V and dO = dY sigmoid(gate) rounded to bf16 scratch;
//         Di = rowsum(dY Y) (= rowsum(dO O)); dgate = dY Y (1 - sigmoid(gate)).
//   dK/dV per (row, kv head, 64 keys): over every query head of the group and every query tile
//         that sees the keys: S^T = K Q^T, dP^T = V dO^T, then dV += P^T dO, dK += dS^T Q with
//         dS = P (dP - Di); the group's sums stay in registers, so no atomics.
//   dQ    per (row, query head, 64 queries): over the key tiles it sees, dQ += dS K, with dS
//         as the dK/dV kernel left it in FlashBackwardParams::ds (bf16 tiles of the causal half:
//         one GEMM), or, without that scratch, S and dP computed again (three products).
// Every product is bf16 mma.sync (m16n8k16) with f32 accumulation, P and dS rounded to bf16 for
// theirs; rows start at position 0 (training). So callers opt in through
// AttentionBackwardArgs::compute = bf16, as for the forward.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

struct FlashBackwardParams {
  int64_t rows = 0, tokens = 0, max_len = 0, q_heads = 0, kv_heads = 0, head_dim = 0;
  const int32_t* cu_seqlens = nullptr;  // [rows + 1]
  // [tokens, heads, head_dim] f32 views.
  Heads<const float> q;
  Heads<const float> k;
  Heads<const float> v;
  Heads<const float> gate;  // null: no gate
  Heads<const float> out;  // Y: the forward's gated output
  Heads<const float> dout;  // dY
  const float* lse = nullptr;  // [tokens, q_heads]: max + log2(sum), in units of S scale log2(e)
  Heads<float> dq;
  Heads<float> dk;
  Heads<float> dv;
  Heads<float> dgate;
  // Scratch: Q and dO [tokens, q_heads, head_dim] bf16, K and V [tokens, kv_heads, head_dim]
  // bf16 (16-byte aligned), Di [tokens, q_heads] f32.
  void* qb = nullptr;
  void* dob = nullptr;
  void* kb = nullptr;
  void* vb = nullptr;
  float* di = nullptr;
  // Optional: flash_backward_ds_bytes of bf16 scratch for the dS tiles, 16-byte aligned.
  void* ds = nullptr;
  float scale = 1.f;
};

// The bytes of FlashBackwardParams::ds for these rows: a [64, 64] bf16 tile for every query head
// and every pair (query tile, key tile at or before it) of each row.
int64_t flash_backward_ds_bytes(const int32_t* host_cu_seqlens, int64_t rows, int64_t q_heads);

// The head_dims with a kernel instance (128 and 256: those of flash_prefill) whose kernels fit the
// target's shared memory (device_target(); 217 KB at head_dim 256: sm_90 only).
bool flash_backward_supports(int64_t head_dim);
Status flash_backward(const FlashBackwardParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
