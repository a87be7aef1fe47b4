// Partial rotary embedding ("rotate half" inside the first rotary_dim dims of each head), in place
// on q [tokens, q_heads, head_dim] and k [tokens, kv_heads, head_dim], both strided.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/status.h"

namespace kiln::cuda {

struct RopeParams {
  int64_t tokens = 0, q_heads = 0, kv_heads = 0, head_dim = 0, rotary_dim = 0;
  Heads<float> q;
  Heads<float> k;
  const int32_t* positions = nullptr;  // [tokens]
  float theta = 10000.f;
};

Status rope(const RopeParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
