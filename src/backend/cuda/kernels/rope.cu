#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/rope.h"

namespace kiln::cuda {

namespace {

constexpr int kMaxHalf = 256;  // rotary_dim / 2 at most (head_dim 512)

// One block per token; threads over (head, i < half). inv_freq and the angle are rounded to f32
// exactly as the CPU reference does (angle = float(pos) * inv_freq), cos/sin taken in double,
// once a frequency (not once a head) and before pdl_begin: positions are written only by copies,
// never by a kernel, so the predecessor's tail hides them.
__global__ void rope_kernel(RopeParams p) {
  __shared__ float cos_s[kMaxHalf], sin_s[kMaxHalf];
  const int64_t t = blockIdx.x;
  const int64_t half = p.rotary_dim / 2, heads = p.q_heads + p.kv_heads;
  const float pos = static_cast<float>(p.positions[t]);
  for (int64_t i = threadIdx.x; i < half; i += blockDim.x) {
    const float inv_freq = static_cast<float>(1.0 / pow(static_cast<double>(p.theta), (2.0 * i) / p.rotary_dim));
    const float angle = pos * inv_freq;
    cos_s[i] = static_cast<float>(cos(static_cast<double>(angle)));
    sin_s[i] = static_cast<float>(sin(static_cast<double>(angle)));
  }
  __syncthreads();
  pdl_begin();
  for (int64_t idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    const float c = cos_s[i], s = sin_s[i];
    float* v = h < p.q_heads ? p.q.at(t, h) : p.k.at(t, h - p.q_heads);
    const float x1 = v[i], x2 = v[i + half];
    v[i] = x1 * c - x2 * s;
    v[i + half] = x2 * c + x1 * s;
  }
}

}  // namespace

Status rope(const RopeParams& p, cudaStream_t stream) {
  auto shape = [&] { return "tokens=" + std::to_string(p.tokens) + " q_heads=" + std::to_string(p.q_heads) +
                            " kv_heads=" + std::to_string(p.kv_heads) + " head_dim=" + std::to_string(p.head_dim) +
                            " rotary_dim=" + std::to_string(p.rotary_dim); };
  if (p.tokens == 0) return {};
  if (p.rotary_dim < 0 || p.rotary_dim / 2 > kMaxHalf || p.rotary_dim > p.head_dim)
    return invalid_argument("rope_kernel: rotary_dim out of range (" + shape() + ")");
  launch_pdl(rope_kernel, static_cast<unsigned>(p.tokens), 128, 0, stream, p);
  return launch_status("rope_kernel", shape, stream);
}

}  // namespace kiln::cuda
