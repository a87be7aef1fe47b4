#include "backend/cuda/kernels/conv_backward.h"
#include "backend/cuda/kernels/launch.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kTile = 16;

// Grid: (channel blocks, token tiles, rows). Row-local indices: output t reads inputs
// t - (K-1) .. t (zero before the row), y[t] = sum_k w[k] x[t + k - (K-1)], dy[t] = dout[t] *
// silu'(y[t]); input j feeds outputs j .. j + K-1 inside the row, dx[j] = sum_k w[k] dy[j + K-1-k].
// A tile of inputs [js, js + kTile) needs dy over [js, js + kTile + K - 1): kept in registers
// (K is a template parameter, so every index below is a compile-time constant).
template <int K>
__global__ void conv_backward_kernel(ConvBackwardParams p) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.z;
  if (c >= p.channels) return;
  int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  t0 = t0 < 0 ? 0 : (t0 > p.tokens ? p.tokens : t0);  // memory safety on a malformed layout
  t1 = t1 < t0 ? t0 : (t1 > p.tokens ? p.tokens : t1);
  const int64_t n = t1 - t0;
  float w[K];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = p.weight.row(c)[k];
  const float* x = p.x.row(t0) + c;
  const float* dout = p.dout.row(t0) + c;
  float* dx = p.dx.row(t0) + c;
  for (int64_t js = static_cast<int64_t>(blockIdx.y) * kTile; js < n; js += static_cast<int64_t>(gridDim.y) * kTile) {
    constexpr int L = kTile + K - 1;
    float win[K];  // inputs t - (K-1) .. t of the output t in hand
#pragma unroll
    for (int k = 0; k < K - 1; ++k) {
      const int64_t tt = js - (K - 1) + k;
      win[k] = tt >= 0 && tt < n ? x[tt * p.x.stride] : 0.f;
    }
    float dy[L];
#pragma unroll
    for (int l = 0; l < L; ++l) {
      const int64_t t = js + l;
      win[K - 1] = t < n ? x[t * p.x.stride] : 0.f;
      float y = 0.f;
#pragma unroll
      for (int k = 0; k < K; ++k) y += w[k] * win[k];
      const float sg = 1.f / (1.f + expf(-y));
      dy[l] = t < n ? dout[t * p.dout.stride] * sg * (1.f + y * (1.f - sg)) : 0.f;
#pragma unroll
      for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
    }
#pragma unroll
    for (int l = 0; l < kTile; ++l) {
      const int64_t j = js + l;
      if (j >= n) break;
      float acc = 0.f;
#pragma unroll
      for (int k = 0; k < K; ++k) acc += w[k] * dy[l + K - 1 - k];  // the CPU's order
      dx[j * p.dx.stride] = acc;
    }
  }
}

}  // namespace

Status conv_backward(const ConvBackwardParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " channels=" +
                            std::to_string(p.channels) + " kernel=" + std::to_string(p.kernel); };
  if (p.rows == 0 || p.tokens == 0 || p.channels == 0) return {};
  if (p.kernel < 1 || p.kernel > kConvMaxKernel)
    return invalid_argument("conv_backward_kernel: kernel outside 1.." + std::to_string(kConvMaxKernel) + " (" +
                            shape() + ")");
  if (p.rows > 65535) return invalid_argument("conv_backward_kernel: more than 65535 rows (" + shape() + ")");
  const int64_t longest = p.max_row_tokens > 0 ? p.max_row_tokens : p.tokens;
  const dim3 grid(grid_blocks(p.channels, kThreads, 0x7fffffff), grid_blocks(longest, kTile, 65535),
                  static_cast<unsigned>(p.rows));
  switch (p.kernel) {
    case 1: conv_backward_kernel<1><<<grid, kThreads, 0, stream>>>(p); break;
    case 2: conv_backward_kernel<2><<<grid, kThreads, 0, stream>>>(p); break;
    case 3: conv_backward_kernel<3><<<grid, kThreads, 0, stream>>>(p); break;
    case 4: conv_backward_kernel<4><<<grid, kThreads, 0, stream>>>(p); break;
    case 5: conv_backward_kernel<5><<<grid, kThreads, 0, stream>>>(p); break;
    case 6: conv_backward_kernel<6><<<grid, kThreads, 0, stream>>>(p); break;
    case 7: conv_backward_kernel<7><<<grid, kThreads, 0, stream>>>(p); break;
    default: conv_backward_kernel<8><<<grid, kThreads, 0, stream>>>(p); break;
  }
  return launch_status("conv_backward_kernel", shape, stream);
}

}  // namespace kiln::cuda
