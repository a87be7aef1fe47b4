#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/rms_norm.h"

namespace kiln::cuda {

namespace {

// One block per row. Each thread touches the same columns in both passes, so x may alias out.
__global__ void rms_norm_kernel(RmsNormParams p) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* x = p.x + row * p.x_stride;
  float* res = p.residual ? p.residual + row * p.residual_stride : nullptr;
  float ss = 0.f;
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x) {
    float v = x[j];
    if (res) {
      v = res[j] + v;
      res[j] = v;
    }
    ss += v * v;
  }
  ss = block_sum(ss, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(p.width) + p.eps);
  const float* src = res ? res : x;
  float* y = p.out + row * p.out_stride;
  const float* z = p.gate ? p.gate + row * p.gate_stride : nullptr;
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x) {
    const float v = src[j], w = p.weight[j];
    switch (p.kind) {
      case RmsKind::kOnePlus: y[j] = v * inv * (1.f + w); break;
      case RmsKind::kPlain: y[j] = v * inv * w; break;
      case RmsKind::kGated: {
        const float g = z[j];
        y[j] = w * (v * inv) * (g / (1.f + expf(-g)));
        break;
      }
    }
  }
}

}  // namespace

Status rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " width=" + std::to_string(p.width); };
  if (p.rows == 0) return {};
  if (p.rows > 0x7fffffff) return invalid_argument("rms_norm_kernel: too many rows (" + shape() + ")");
  const int threads = p.width >= 1024 ? 256 : (p.width >= 256 ? 128 : 64);
  rms_norm_kernel<<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return launch_status("rms_norm_kernel", shape, stream);
}

}  // namespace kiln::cuda
