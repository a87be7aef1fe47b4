// Eight weights at a time: a 16-byte load of bf16/f16 values widened to f32 (exactly), and their
// dot product with eight f32 values held as two float4s. Shared by the kernels that stream weight
// rows against f32 activations (gemv.cu, lora.cu).
#pragma once

#include <cuda_fp16.h>

#include <cstdint>

namespace kiln::cuda {

template <bool kBF16>
__device__ __forceinline__ void unpack8(const uint4& w, float (&f)[8]) {
  const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kBF16) {
      f[2 * i] = __uint_as_float(words[i] << 16);
      f[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
    } else {
      __half2 h;
      memcpy(&h, &words[i], sizeof h);
      const float2 v = __half22float2(h);
      f[2 * i] = v.x;
      f[2 * i + 1] = v.y;
    }
  }
}

// s + w . (a, b), as eight fused multiply-adds in order.
__device__ __forceinline__ float dot8(const float (&w)[8], const float4& a, const float4& b, float s) {
  s = fmaf(w[0], a.x, s);
  s = fmaf(w[1], a.y, s);
  s = fmaf(w[2], a.z, s);
  s = fmaf(w[3], a.w, s);
  s = fmaf(w[4], b.x, s);
  s = fmaf(w[5], b.y, s);
  s = fmaf(w[6], b.z, s);
  s = fmaf(w[7], b.w, s);
  return s;
}

}  // namespace kiln::cuda
