#include "backend/cuda/kernels/attention_backward.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

struct Located {
  int64_t token, head, pos;  // pos: the position within the row
};

__device__ __forceinline__ Located locate(const AttnRowMap& m, int64_t r) {
  const int64_t hh = r / m.tq, tt = r - hh * m.tq;
  const int64_t jj = hh / m.gi, ii = hh - jj * m.gi;
  const int64_t pos = m.t0 + tt;
  return {m.begin + pos, (m.j0 + jj) * m.group + m.i0 + ii, pos};
}

__device__ __forceinline__ int64_t thread_index() {
  return blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
}
__device__ __forceinline__ int64_t thread_count() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

__global__ void gather_kernel(Heads<float> src, AttnRowMap map, int64_t rows, int64_t D, float* dst) {
  const int64_t n = rows * D;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t r = i / D, e = i - r * D;
    const Located at = locate(map, r);
    dst[i] = src.at(at.token, at.head)[e];
  }
}

__global__ void scatter_kernel(const float* src, AttnRowMap map, int64_t rows, int64_t D, Heads<float> dst) {
  const int64_t n = rows * D;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t r = i / D, e = i - r * D;
    const Located at = locate(map, r);
    dst.at(at.token, at.head)[e] = src[i];
  }
}

// One warp per score row (the loop bounds are uniform across a warp, so the shuffles are full).
// The same three passes as the CPU: max, exponentials and their sum, normalisation.
__global__ void causal_softmax_kernel(AttnChunkParams p) {
  const int lane = threadIdx.x & 31;
  for (int64_t r = thread_index() >> 5; r < p.rows; r += thread_count() >> 5) {
    const int64_t last = locate(p.map, r).pos;  // keys 0..last; last < p.keys
    float* s = p.p + r * p.keys;
    float mx = -INFINITY;
    for (int64_t c = lane; c <= last; c += 32) mx = fmaxf(mx, s[c]);
    mx = warp_max(mx);
    float sum = 0.f;
    for (int64_t c = lane; c <= last; c += 32) {
      const float e = expf(s[c] - mx);
      s[c] = e;
      sum += e;
    }
    const float inv = 1.f / warp_sum(sum);
    for (int64_t c = lane; c < p.keys; c += 32) s[c] = c <= last ? s[c] * inv : 0.f;
  }
}

// One warp per output row: the gate's gradient, dO, and Di = dO . o.
__global__ void output_grad_kernel(AttnChunkParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t D = p.head_dim;
  const bool gated = p.gate.ptr != nullptr;
  for (int64_t r = thread_index() >> 5; r < p.rows; r += thread_count() >> 5) {
    const Located at = locate(p.map, r);
    const float* o = p.o + r * D;
    float* d = p.dout + r * D;
    const float* g = gated ? p.gate.at(at.token, at.head) : nullptr;
    float* dg = gated ? p.dgate.at(at.token, at.head) : nullptr;
    float acc = 0.f;
    for (int64_t e = lane; e < D; e += 32) {
      float dy = d[e];
      const float ov = o[e];
      if (gated) {
        const float s = 1.f / (1.f + expf(-g[e]));
        dg[e] = dy * ov * s * (1.f - s);
        dy *= s;
      }
      d[e] = dy;
      acc += dy * ov;
    }
    acc = warp_sum(acc);
    if (lane == 0) p.di[r] = acc;
  }
}

__global__ void score_grad_kernel(AttnChunkParams p) {
  const int64_t n = p.rows * p.keys;
  for (int64_t i = thread_index(); i < n; i += thread_count()) {
    const int64_t r = i / p.keys;
    p.ds[i] = p.p[i] * (p.ds[i] - p.di[r]) * p.scale;
  }
}

std::string shape(const char* what, int64_t rows, int64_t cols) {
  return std::string(what) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols);
}

}  // namespace

Status attention_gather(Heads<float> src, const AttnRowMap& map, int64_t rows, int64_t head_dim, float* dst,
                        cudaStream_t stream) {
  gather_kernel<<<grid_blocks(rows * head_dim, kThreads), kThreads, 0, stream>>>(src, map, rows, head_dim, dst);
  return launch_status("attention_gather", [&] { return shape("gather", rows, head_dim); }, stream);
}

Status attention_scatter(const float* src, const AttnRowMap& map, int64_t rows, int64_t head_dim, Heads<float> dst,
                         cudaStream_t stream) {
  scatter_kernel<<<grid_blocks(rows * head_dim, kThreads), kThreads, 0, stream>>>(src, map, rows, head_dim, dst);
  return launch_status("attention_scatter", [&] { return shape("scatter", rows, head_dim); }, stream);
}

Status attention_causal_softmax(const AttnChunkParams& p, cudaStream_t stream) {
  causal_softmax_kernel<<<grid_blocks(p.rows, kWarps), kThreads, 0, stream>>>(p);
  return launch_status("attention_causal_softmax", [&] { return shape("softmax", p.rows, p.keys); }, stream);
}

Status attention_output_grad(const AttnChunkParams& p, cudaStream_t stream) {
  output_grad_kernel<<<grid_blocks(p.rows, kWarps), kThreads, 0, stream>>>(p);
  return launch_status("attention_output_grad", [&] { return shape("output grad", p.rows, p.head_dim); }, stream);
}

Status attention_score_grad(const AttnChunkParams& p, cudaStream_t stream) {
  score_grad_kernel<<<grid_blocks(p.rows * p.keys, kThreads), kThreads, 0, stream>>>(p);
  return launch_status("attention_score_grad", [&] { return shape("score grad", p.rows, p.keys); }, stream);
}

}  // namespace kiln::cuda
