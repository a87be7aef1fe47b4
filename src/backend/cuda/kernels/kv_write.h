// Writes new K/V rows into the paged caches [slots, kv_heads, head_dim] through a slot mapping.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

struct KvWriteParams {
  int64_t tokens = 0, kv_heads = 0, head_dim = 0, slots = 0;
  Heads<const float> k;
  Heads<const float> v;
  void* k_cache = nullptr;  // kv_dtype elements
  void* v_cache = nullptr;
  DType kv_dtype = DType::kF32;  // f32, bf16 or f8e4m3 (kv_elem.cuh)
  const int32_t* slot_mapping = nullptr;  // [tokens]; slots outside [0, slots) are skipped
};

Status kv_write(const KvWriteParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
