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

// The elements of one 32-bit word of the cache (1 f32, 2 bf16 or 4 e4m3, the lowest address
// first) widened to f32 at d. e4m3 goes through f16, which holds every e4m3 value exactly.
__device__ __forceinline__ void widen_word(float, uint32_t w, float* d) { d[0] = __uint_as_float(w); }
__device__ __forceinline__ void widen_word(__nv_bfloat16, uint32_t w, float* d) {
  d[0] = __uint_as_float(w << 16);
  d[1] = __uint_as_float(w & 0xffff0000u);
}
__device__ __forceinline__ void widen_word(__nv_fp8_e4m3, uint32_t w, float* d) {
  auto pair = [](uint32_t h) {
    return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(h), __NV_E4M3)));
  };
  const float2 lo = pair(w & 0xffffu), hi = pair(w >> 16);
  d[0] = lo.x;
  d[1] = lo.y;
  d[2] = hi.x;
  d[3] = hi.y;
}

// N consecutive elements at src widened to f32, in the widest loads (16, 8 or 4 bytes) that N
// elements fill; src must be aligned to that width (a cache row offset plus a multiple of N
// elements is). kGlobal: through the read-only cache (__ldg); otherwise a plain load (shared
// memory).
template <int N, bool kGlobal = true, typename KV>
__device__ __forceinline__ void load_kv(const KV* src, float (&dst)[N]) {
  constexpr int kBytes = N * static_cast<int>(sizeof(KV)), kPerWord = 4 / static_cast<int>(sizeof(KV));
  auto load = [&](auto vec, int i) {
    using V = decltype(vec);
    const V* q = reinterpret_cast<const V*>(src + i);
    return kGlobal ? __ldg(q) : *q;
  };
  if constexpr (kBytes % 16 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 4 * kPerWord) {
      const uint4 v = load(uint4{}, i);
      widen_word(KV{}, v.x, dst + i);
      widen_word(KV{}, v.y, dst + i + kPerWord);
      widen_word(KV{}, v.z, dst + i + 2 * kPerWord);
      widen_word(KV{}, v.w, dst + i + 3 * kPerWord);
    }
  } else if constexpr (kBytes % 8 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += 2 * kPerWord) {
      const uint2 v = load(uint2{}, i);
      widen_word(KV{}, v.x, dst + i);
      widen_word(KV{}, v.y, dst + i + kPerWord);
    }
  } else if constexpr (kBytes % 4 == 0) {
#pragma unroll
    for (int i = 0; i < N; i += kPerWord) widen_word(KV{}, load(uint32_t{}, i), dst + i);
  } else {
#pragma unroll
    for (int i = 0; i < N; ++i) dst[i] = kv_float(src[i]);
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
