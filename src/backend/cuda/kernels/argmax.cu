#include <climits>

#include "backend/cuda/kernels/argmax.h"
#include "backend/cuda/kernels/launch.h"

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

__global__ void __launch_bounds__(kThreads) argmax_kernel(ArgmaxParams p) {
  __shared__ float vs[kThreads / 32];
  __shared__ int is[kThreads / 32];
  const int64_t r = blockIdx.x;
  const float* l = p.logits + r * p.logits_stride;
  float v = -INFINITY;
  int idx = INT_MAX;
  for (int64_t j = threadIdx.x; j < p.vocab; j += kThreads) {
    const float x = l[j];
    if (!isnan(x)) better(v, idx, x, static_cast<int>(j));
  }
  for (int o = 16; o > 0; o >>= 1)
    better(v, idx, __shfl_xor_sync(0xffffffffu, v, o), __shfl_xor_sync(0xffffffffu, idx, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    vs[warp] = v;
    is[warp] = idx;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kThreads / 32; ++w) better(v, idx, vs[w], is[w]);
    p.ids[r] = idx == INT_MAX ? 0 : idx;
  }
}

}  // namespace

Status argmax(const ArgmaxParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " vocab=" + std::to_string(p.vocab); };
  if (p.rows == 0) return {};
  if (p.vocab > INT_MAX) return invalid_argument("argmax_kernel: vocab above INT_MAX (" + shape() + ")");
  argmax_kernel<<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
  return launch_status("argmax_kernel", shape, stream);
}

}  // namespace kiln::cuda
