// The element of the paged K/V cache: f32, or bf16 for a bf16 checkpoint (ModelState chooses;
// half the bytes a decode step reads, and what the checkpoint's own framework stores). The kernels
// that write or read the cache (kv_write.cu, paged_attention*.cu, flash_prefill.cu) are templates
// over KV; reads widen to f32 exactly, writes round to nearest.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>
#include <type_traits>

namespace kiln::cuda {

#ifdef __CUDACC__
__device__ __forceinline__ void store_kv(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_kv(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }
__device__ __forceinline__ float kv_float(float v) { return v; }
__device__ __forceinline__ float kv_float(__nv_bfloat16 v) { return __bfloat162float(v); }

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
#endif

// The element type behind with_kv_type's pointer: `using KV = kv_t<decltype(kv)>;`.
template <typename P>
using kv_t = std::remove_cv_t<std::remove_pointer_t<P>>;

// Calls f with a null pointer of the cache's element type (float or __nv_bfloat16), for a
// launcher to pick its kernel instance.
template <typename F>
decltype(auto) with_kv_type(bool bf16, F&& f) {
  if (bf16) return f(static_cast<const __nv_bfloat16*>(nullptr));
  return f(static_cast<const float*>(nullptr));
}

}  // namespace kiln::cuda
