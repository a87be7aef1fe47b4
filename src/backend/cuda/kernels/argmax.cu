#include <climits>

#include "backend/cuda/kernels/argmax.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 512;

// (value, index) pairs: the larger value wins, then the smaller index. The identity is
// (-inf, INT_MAX), so a real -inf at any index beats it.
__device__ __forceinline__ void better(float& v, int& i, float ov, int oi) {
  if (ov > v || (ov == v && oi < i)) {
    v = ov;
    i = oi;
  }
}

// The block's (value, index) winner, in thread 0.
__device__ __forceinline__ void block_best(float& v, int& idx, float* vs, int* is) {
  for (int o = 16; o > 0; o >>= 1)
    better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // vs / is may still be read by a previous call
  if (lane == 0) {
    vs[warp] = v;
    is[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < kThreads / 32; ++w) better(v, idx, vs[w], is[w]);
}

// Grid: (chunks, rows).
__global__ void __launch_bounds__(kThreads) argmax_kernel(ArgmaxParams p) {
  pdl_begin();
  __shared__ float vs[kThreads / 32];
  __shared__ int is[kThreads / 32];
  __shared__ bool last;
  const int64_t r = blockIdx.y, chunk = blockIdx.x, chunks = gridDim.x;
  const float* l = p.logits.row(r);
  const int64_t begin = chunk * kArgmaxChunk, end = begin + kArgmaxChunk < p.vocab ? begin + kArgmaxChunk : p.vocab;
  float v = -INFINITY;
  int idx = INT_MAX;
  const int32_t mask_at = p.mask_offsets == nullptr ? -1 : p.mask_offsets[r];
  if (mask_at < 0) {
#pragma unroll 4
    for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) {
      const float x = l[j];
      if (!isnan(x)) better(v, idx, x, static_cast<int>(j));
    }
  } else {
    const uint32_t* m = p.masks + mask_at;
    for (int64_t j = begin + threadIdx.x; j < end; j += kThreads) {
      const float x = l[j];
      if (!isnan(x) && ((m[j >> 5] >> (j & 31)) & 1u)) better(v, idx, x, static_cast<int>(j));
    }
  }
  block_best(v, idx, vs, is);
  if (chunks == 1) {
    if (threadIdx.x == 0) p.ids[r] = idx == INT_MAX ? 0 : idx;
    return;
  }
  if (threadIdx.x == 0) {
    p.part_values[r * chunks + chunk] = v;
    p.part_indices[r * chunks + chunk] = idx;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(p.counters + r, 1u) == static_cast<unsigned>(chunks - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  v = -INFINITY;
  idx = INT_MAX;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads)
    better(v, idx, __ldcg(p.part_values + r * chunks + c), __ldcg(p.part_indices + r * chunks + c));
  block_best(v, idx, vs, is);
  if (threadIdx.x == 0) {
    p.ids[r] = idx == INT_MAX ? 0 : idx;
    p.counters[r] = 0;
  }
}

}  // namespace

Status argmax(const ArgmaxParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " vocab=" + std::to_string(p.vocab); };
  if (p.rows == 0) return {};
  if (p.vocab > INT_MAX) return invalid_argument("argmax_kernel: vocab above INT_MAX (" + shape() + ")");
  const int64_t chunks = argmax_chunks(p.vocab);
  if (p.rows > 65535 || chunks > 0x7fffffff) return invalid_argument("argmax_kernel: grid too large (" + shape() + ")");
  if (chunks > 1 && (p.part_values == nullptr || p.part_indices == nullptr || p.counters == nullptr))
    return invalid_argument("argmax_kernel: no scratch for the partial results (" + shape() + ")");
  const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(p.rows));
  launch_pdl(argmax_kernel, grid, kThreads, 0, stream, p);
  return launch_status("argmax_kernel", shape, stream);
}

}  // namespace kiln::cuda
