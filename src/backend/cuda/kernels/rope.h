// Partial rotary embedding ("rotate half" inside the first rotary_dim dims of each head), in place
// on q [tokens, q_heads, head_dim] and k [tokens, kv_heads, head_dim], both strided.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/status.h"

namespace kiln::cuda {

struct RopeParams {
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  float* q = nullptr; int64_t q_token_stride = 0, q_head_stride = 0;
  float* k = nullptr; int64_t k_token_stride = 0, k_head_stride = 0;
  const int32_t* positions = nullptr;  // [tokens]
  float theta = 10000.f;
};

Status rope(const RopeParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
