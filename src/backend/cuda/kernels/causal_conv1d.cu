#include "backend/cuda/kernels/causal_conv1d.h"
#include "backend/cuda/kernels/launch.h"

namespace kiln::cuda {

namespace {

// Grid: (channel blocks, rows). The window lives in registers (K is a template parameter).
template <int K>
__global__ void causal_conv1d_kernel(CausalConv1dParams p) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.y;
  if (c >= p.channels) return;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots) return;
  const int64_t C = p.channels;
  float* st = p.state + slot * (K - 1) * C + c;
  float w[K], win[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = p.weight[c * p.weight_stride + k];
#pragma unroll
  for (int k = 0; k < K - 1; ++k) win[k] = st[k * C];
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  for (int64_t t = t0; t < t1; ++t) {
    win[K - 1] = p.x[t * p.x_stride + c];
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += w[k] * win[k];
    p.out[t * p.out_stride + c] = acc / (1.f + expf(-acc));
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
  }
#pragma unroll
  for (int k = 0; k < K - 1; ++k) st[k * C] = win[k];
}

}  // namespace

Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream) {
  const std::string shape = "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) +
                            " channels=" + std::to_string(p.channels) + " kernel=" + std::to_string(p.kernel);
  if (p.rows == 0 || p.channels == 0) return {};
  if (p.rows > 65535) return invalid_argument("causal_conv1d_kernel: more than 65535 rows (" + shape + ")");
  constexpr int kThreads = 128;
  dim3 grid(grid_blocks(p.channels, kThreads, 0x7fffffff), static_cast<unsigned>(p.rows));
  switch (p.kernel) {
    case 2: causal_conv1d_kernel<2><<<grid, kThreads, 0, stream>>>(p); break;
    case 3: causal_conv1d_kernel<3><<<grid, kThreads, 0, stream>>>(p); break;
    case 4: causal_conv1d_kernel<4><<<grid, kThreads, 0, stream>>>(p); break;
    case 5: causal_conv1d_kernel<5><<<grid, kThreads, 0, stream>>>(p); break;
    case 6: causal_conv1d_kernel<6><<<grid, kThreads, 0, stream>>>(p); break;
    case 7: causal_conv1d_kernel<7><<<grid, kThreads, 0, stream>>>(p); break;
    case 8: causal_conv1d_kernel<8><<<grid, kThreads, 0, stream>>>(p); break;
    default: return invalid_argument("causal_conv1d_kernel: kernel width must be 2..8 (" + shape + ")");
  }
  return launch_status("causal_conv1d_kernel", shape, stream);
}

}  // namespace kiln::cuda
