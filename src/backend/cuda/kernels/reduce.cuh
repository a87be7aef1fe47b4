// Block-wide sums and maxima for the kernels (any block size that is a multiple of 32, <= 1024).
#pragma once

namespace kiln::cuda {

template <typename T>
__device__ __forceinline__ T warp_sum_of(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_sum(float v) { return warp_sum_of(v); }

// Sum over the block in a fixed tree; every thread gets the result. `scratch` holds 32 values.
template <typename T>
__device__ __forceinline__ T block_sum_of(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = (blockDim.x + 31) >> 5;
  v = warp_sum_of(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = lane < warps ? scratch[lane] : T(0);
  return warp_sum_of(t);
}
__device__ __forceinline__ float block_sum(float v, float* scratch) { return block_sum_of(v, scratch); }
__device__ __forceinline__ double block_sum(double v, double* scratch) { return block_sum_of(v, scratch); }

}  // namespace kiln::cuda
