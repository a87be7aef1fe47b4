// The element of the paged K/V cache: f32; bf16 for a bf16 checkpoint (ModelState chooses; half
// the bytes a decode step reads, and what the checkpoint's own framework stores); or fp8 e4m3 when
// asked (`memory.kv_cache_fp8`: a quarter of f32's bytes, 3 mantissa bits, unscaled: values
// saturate at +-448). The kernels that write or read the cache (kv_write.cu, paged_attention*.cu,
// flash_prefill.cu) are templates over KV; reads widen to f32 exactly, writes round to nearest
// (e4m3: saturating, as core/dtype.h's f32_to_e4m3).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"

namespace kiln::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void store_kv(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_kv(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float kv_float(float v) { return v; }
__device__ __forceinline__ float kv_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ void store_kv(__nv_fp8_e4m3* p, float v) { *p = __nv_fp8_e4m3(v); }  // RN, satfinite
__device__ __forceinline__ float kv_float(__nv_fp8_e4m3 v) { return static_cast<float>(v); }

// Two e4m3 values (the low byte first) widened to f32 through f16, which holds every e4m3 exactly.
__device__ __forceinline__ float2 e4m3x2_float(uint16_t w) {
  return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w), __NV_E4M3)));
}

// N consecutive elements at src (aligned to N elements where N is a multiple of the vector
// width) widened to f32. kGlobal: through the read-only cache (__ldg); otherwise a plain load
// (shared memory).
template <int N, bool kGlobal = true>
__device__ __forceinline__ void load_kv(const float* src, float (&dst)[N]) {
  if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const float4* q = reinterpret_cast<const float4*>(src + i);
      const float4 v = kGlobal ? __ldg(q) : *q;
      dst[i] = v.x;
      dst[i + 1] = v.y;
      dst[i + 2] = v.z;
      dst[i + 3] = v.w;
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = kGlobal ? __ldg(src + i) : src[i];
  }
}

template <int N, bool kGlobal = true>
__device__ __forceinline__ void load_kv(const __nv_bfloat16* src, float (&dst)[N]) {
  auto widen = [&](uint32_t w, int i) {
    dst[i] = __uint_as_float(w << 16);
    dst[i + 1] = __uint_as_float(w & 0xffff0000u);
  };
  if constexpr (N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 8) {
      const uint4* q = reinterpret_cast<const uint4*>(src + i);
      const uint4 v = kGlobal ? __ldg(q) : *q;
      widen(v.x, i);
      widen(v.y, i + 2);
      widen(v.z, i + 4);
      widen(v.w, i + 6);
    }
  } else if constexpr (N % 2 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(src + i);
      widen(kGlobal ? __ldg(q) : *q, i);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = __bfloat162float(src[i]);
  }
}

template <int N, bool kGlobal = true>
__device__ __forceinline__ void load_kv(const __nv_fp8_e4m3* src, float (&dst)[N]) {
  auto widen4 = [&](uint32_t w, int i) {
    const float2 lo = e4m3x2_float(static_cast<uint16_t>(w)), hi = e4m3x2_float(static_cast<uint16_t>(w >> 16));
    dst[i] = lo.x;
    dst[i + 1] = lo.y;
    dst[i + 2] = hi.x;
    dst[i + 3] = hi.y;
  };
  if constexpr (N % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 16) {
      const uint4* q = reinterpret_cast<const uint4*>(src + i);
      const uint4 v = kGlobal ? __ldg(q) : *q;
      widen4(v.x, i);
      widen4(v.y, i + 4);
      widen4(v.z, i + 8);
      widen4(v.w, i + 12);
    }
  } else if constexpr (N % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 8) {
      const uint2* q = reinterpret_cast<const uint2*>(src + i);
      const uint2 v = kGlobal ? __ldg(q) : *q;
      widen4(v.x, i);
      widen4(v.y, i + 4);
    }
  } else if constexpr (N % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4) {
      const uint32_t* q = reinterpret_cast<const uint32_t*>(src + i);
      widen4(kGlobal ? __ldg(q) : *q, i);
    }
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = static_cast<float>(src[i]);
  }
}
#endif

// The element type behind with_kv_type's pointer: `using KV = kv_t<decltype(kv)>;`.
template <typename P>
using kv_t = std::remove_cv_t<std::remove_pointer_t<P>>;

// Whether the cache kernels take K/V elements of dtype d (f32, bf16, f8e4m3).
inline bool kv_dtype_supported(DType d) { return d == DType::kF32 || d == DType::kBF16 || d == DType::kF8E4M3; }

// Calls f with a null pointer of the cache's element type (float, __nv_bfloat16 or
// __nv_fp8_e4m3; d is one kv_dtype_supported takes), for a launcher to pick its kernel instance.
template <typename F>
decltype(auto) with_kv_type(DType d, F&& f) {
  if (d == DType::kBF16) return f(static_cast<const __nv_bfloat16*>(nullptr));
  if (d == DType::kF8E4M3) return f(static_cast<const __nv_fp8_e4m3*>(nullptr));
  return f(static_cast<const float*>(nullptr));
}

}  // namespace kiln::cuda
