#include <algorithm>
#include <string>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/sum_squares.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 128;  // tensors per launch: the group's pointers travel as a kernel parameter

struct Group {
  int count = 0;
  const float* data[kGroup] = {};
  int64_t n[kGroup] = {};
};

// Grid (kSumSquaresBlocks, group count): block b of tensor i sums the squares of the elements
// b, b + stride, ... into partial[(first + i) * kSumSquaresBlocks + b].
__global__ void partial_kernel(Group g, int64_t first, double* partial) {
  __shared__ double scratch[32];
  const int i = blockIdx.y;
  const float* x = g.data[i];
  const int64_t n = g.n[i];
  double s = 0.0;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const double v = x[e];
    s += v * v;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partial[(first + i) * kSumSquaresBlocks + blockIdx.x] = s;
}

// One block: thread t adds partials t, t + blockDim.x, ... in order; then the block's fixed tree.
__global__ void total_kernel(const double* partial, int64_t count, double* out) {
  __shared__ double scratch[32];
  double s = 0.0;
  for (int64_t e = threadIdx.x; e < count; e += blockDim.x) s += partial[e];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) *out = s;
}

}  // namespace

size_t sum_squares_scratch_bytes(size_t count) { return std::max<size_t>(count, 1) * kSumSquaresBlocks * sizeof(double); }

Status sum_squares(std::span<const SumSquaresInput> inputs, void* scratch, double* out, cudaStream_t stream) {
  if (out == nullptr || (scratch == nullptr && !inputs.empty())) return invalid_argument("sum_squares: no scratch or output");
  auto* partial = static_cast<double*>(scratch);
  auto shape = [&] { return "tensors=" + std::to_string(inputs.size()); };
  for (size_t first = 0; first < inputs.size(); first += kGroup) {
    Group g;
    g.count = static_cast<int>(std::min<size_t>(kGroup, inputs.size() - first));
    for (int i = 0; i < g.count; ++i) {
      g.data[i] = inputs[first + i].data;
      g.n[i] = inputs[first + i].n;
    }
    partial_kernel<<<dim3(kSumSquaresBlocks, static_cast<unsigned>(g.count)), kThreads, 0, stream>>>(
        g, static_cast<int64_t>(first), partial);
    KILN_RETURN_IF_ERROR(launch_status("sum_squares_partial_kernel", shape, stream));
  }
  total_kernel<<<1, kThreads, 0, stream>>>(partial, static_cast<int64_t>(inputs.size()) * kSumSquaresBlocks, out);
  return launch_status("sum_squares_total_kernel", shape, stream);
}

}  // namespace kiln::cuda
