// An f32 result stored in a kernel's output type: as it is (float), or rounded to nearest even
// into bf16 / f16 (a GEMM operand written by its producer, the bits the GEMM's own rounding of
// the f32 value would give).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/dtype.h"

namespace kiln::cuda {

__device__ __forceinline__ void store_as(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_as(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ void store_as(__half* p, float v) { *p = __float2half_rn(v); }

// Whether store_as has an output type for d.
inline bool store_dtype_supported(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF16; }

// Calls f with a null pointer of d's output type (float, __nv_bfloat16 or __half; d one
// store_dtype_supported takes), for a launcher to pick its kernel instance.
template <typename F>
decltype(auto) with_store_type(DType d, F&& f) {
  if (d == DType::kBF16) return f(static_cast<__nv_bfloat16*>(nullptr));
  if (d == DType::kF16) return f(static_cast<__half*>(nullptr));
  return f(static_cast<float*>(nullptr));
}

}  // namespace kiln::cuda
