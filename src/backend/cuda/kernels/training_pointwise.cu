#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/training_pointwise.h"

namespace kiln::cuda {

namespace {

__device__ __forceinline__ float sigmoidf(float x) { return 1.f / (1.f + expf(-x)); }

// One row's backward at column j, for both kernels below. Pass 1: x^2 into ss and g x into gn
// (g = dout * w, w the effective weight); pass 2: dgate (gated) and dx.
struct NormRow {
  const NormBackwardParams& p;
  const float *x, *dy, *z;  // z: the gate row, or null
  float *dx, *dz;
  __device__ __forceinline__ void sums(int64_t j, float& ss, float& gn) const {
    const float v = x[j];
    float w = p.kind == RmsKind::kOnePlus ? 1.f + p.weight[j] : p.weight[j];
    if (z) w *= z[j] * sigmoidf(z[j]);
    ss += v * v;
    gn += dy[j] * w * v;
  }
  __device__ __forceinline__ void write(int64_t j, float inv, float mean) const {
    const float v = x[j], d = dy[j], wj = p.weight[j];
    float w = p.kind == RmsKind::kOnePlus ? 1.f + wj : wj;
    if (z) {
      const float zj = z[j], s = sigmoidf(zj);
      w *= zj * s;
      dz[j] = d * wj * v * inv * s * (1.f + zj * (1.f - s));
    }
    const float g = inv * (d * w - v * inv * mean);
    dx[j] = p.accumulate ? dx[j] + g : g;
  }
};

__device__ __forceinline__ NormRow norm_row(const NormBackwardParams& p, int64_t row) {
  const float* z = p.kind == RmsKind::kGated ? p.gate.row(row) : nullptr;
  return {p, p.x.row(row), p.dout.row(row), z, p.dx.row(row), z ? p.dgate.row(row) : nullptr};
}

// One block per row. Pass 1 reads x, dout (and gate) for the two row sums; pass 2 re-reads the
// same columns with the same threads and writes them. The block_sum between the passes is a
// barrier, and in pass 2 a thread writes only the columns it has just read, so dx may alias dout.
__global__ void norm_backward_kernel(NormBackwardParams p) {
  __shared__ float scratch[32];
  const NormRow r = norm_row(p, blockIdx.x);
  float ss = 0.f, gn = 0.f;  // sum x^2; sum g * x (times inv below: sum g * n)
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x) r.sums(j, ss, gn);
  ss = block_sum(ss, scratch);
  gn = block_sum(gn, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(p.width) + p.eps);
  const float mean = gn * inv / static_cast<float>(p.width);
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x) r.write(j, inv, mean);
}

// Rows narrower than 256 columns (the GDN gated norm's rows of dv), which the kernel above runs
// as one block of 64 threads a row: a warp a row, kNarrowRows rows a block, lane l doing the work
// of that block's threads l and l + 32 in the same order and adding their warp sums as block_sum
// does, so the arithmetic is the same. A warp writes only its own row, and only the columns each
// lane has read, so dx may alias dout here too.
constexpr int kNarrowRows = 8;

__global__ void __launch_bounds__(kNarrowRows * 32) norm_backward_narrow_kernel(NormBackwardParams p) {
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNarrowRows + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const NormRow r = norm_row(p, row);
  float ss[2], gn[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float s2 = 0.f, g2 = 0.f;
    for (int64_t j = lane + 32 * h; j < p.width; j += 64) r.sums(j, s2, g2);
    ss[h] = warp_sum(s2);
    gn[h] = warp_sum(g2);
  }
  const float inv = 1.f / sqrtf((ss[0] + ss[1]) / static_cast<float>(p.width) + p.eps);
  const float mean = (gn[0] + gn[1]) * inv / static_cast<float>(p.width);
#pragma unroll
  for (int h = 0; h < 2; ++h)
    for (int64_t j = lane + 32 * h; j < p.width; j += 64) r.write(j, inv, mean);
}

__device__ __forceinline__ void silu_mul_backward_one(float aj, float bj, float d, float& da, float& db) {
  const float sg = sigmoidf(aj);
  db = d * aj * sg;
  da = d * bj * sg * (1.f + aj * (1.f - sg));
}

// V = 4: four columns a thread (width % 4 == 0, every row 16-byte aligned).
template <int V>
__global__ void silu_mul_backward_kernel(SiluMulBackwardParams p) {
  const int64_t groups = p.width / V;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* a = p.a.row(r);
    const float* b = p.b.row(r);
    const float* dy = p.dout.row(r);
    float* da = p.da.row(r);
    float* db = p.db.row(r);
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if constexpr (V == 4) {
        const float4 a4 = reinterpret_cast<const float4*>(a)[j], b4 = reinterpret_cast<const float4*>(b)[j],
                     d4 = reinterpret_cast<const float4*>(dy)[j];
        float4 da4, db4;
        silu_mul_backward_one(a4.x, b4.x, d4.x, da4.x, db4.x);
        silu_mul_backward_one(a4.y, b4.y, d4.y, da4.y, db4.y);
        silu_mul_backward_one(a4.z, b4.z, d4.z, da4.z, db4.z);
        silu_mul_backward_one(a4.w, b4.w, d4.w, da4.w, db4.w);
        reinterpret_cast<float4*>(db)[j] = db4;
        reinterpret_cast<float4*>(da)[j] = da4;
      } else {
        silu_mul_backward_one(a[j], b[j], dy[j], da[j], db[j]);
      }
    }
  }
}

// One block per token; threads over (head, i < half), as rope_kernel, whose angles (f32
// inv_freq and angle, cos/sin in double) it recomputes bit for bit; the rotation is by -angle.
__global__ void rope_backward_kernel(RopeBackwardParams p) {
  const int64_t t = blockIdx.x;
  const int64_t half = p.rotary_dim / 2, heads = p.q_heads + p.kv_heads;
  const float pos = static_cast<float>(p.positions[t]);
  for (int64_t idx = threadIdx.x; idx < heads * half; idx += blockDim.x) {
    const int64_t h = idx / half, i = idx % half;
    const float inv_freq = static_cast<float>(1.0 / pow(static_cast<double>(p.theta), (2.0 * i) / p.rotary_dim));
    const float angle = pos * inv_freq;
    const float c = static_cast<float>(cos(static_cast<double>(angle)));
    const float s = static_cast<float>(sin(static_cast<double>(angle)));
    float* v = h < p.q_heads ? p.dq.at(t, h) : p.dk.at(t, h - p.q_heads);
    const float g1 = v[i], g2 = v[i + half];
    v[i] = g1 * c + g2 * s;
    v[i + half] = g2 * c - g1 * s;
  }
}

std::string rows_shape(int64_t rows, int64_t width) {
  return "rows=" + std::to_string(rows) + " width=" + std::to_string(width);
}

}  // namespace

Status norm_backward(const NormBackwardParams& p, cudaStream_t stream) {
  auto shape = [&] { return rows_shape(p.rows, p.width) + " kind=" + std::to_string(static_cast<int>(p.kind)); };
  if (p.rows == 0 || p.width == 0) return {};
  if (p.rows > 0x7fffffff) return invalid_argument("norm_backward_kernel: too many rows (" + shape() + ")");
  if (p.width < 256) {  // the 64-thread rows, a warp each
    norm_backward_narrow_kernel<<<static_cast<unsigned>((p.rows + kNarrowRows - 1) / kNarrowRows), kNarrowRows * 32, 0,
                                  stream>>>(p);
    return launch_status("norm_backward_narrow_kernel", shape, stream);
  }
  const int threads = p.width >= 1024 ? 256 : 128;
  norm_backward_kernel<<<static_cast<unsigned>(p.rows), threads, 0, stream>>>(p);
  return launch_status("norm_backward_kernel", shape, stream);
}

Status silu_mul_backward(const SiluMulBackwardParams& p, cudaStream_t stream) {
  auto shape = [&] { return rows_shape(p.rows, p.width); };
  if (p.rows == 0 || p.width == 0) return {};
  constexpr int kThreads = 256;
  auto aligned = [](const auto& v) { return rows_aligned(v.ptr, v.stride * 4, 16); };
  if (p.width % 4 == 0 && aligned(p.a) && aligned(p.b) && aligned(p.dout) && aligned(p.da) && aligned(p.db)) {
    const dim3 grid(grid_blocks(p.width / 4, kThreads, 1024), grid_blocks(p.rows, 1, 65535));
    silu_mul_backward_kernel<4><<<grid, kThreads, 0, stream>>>(p);
    return launch_status("silu_mul_backward_kernel<4>", shape, stream);
  }
  const dim3 grid(grid_blocks(p.width, kThreads, 1024), grid_blocks(p.rows, 1, 65535));
  silu_mul_backward_kernel<1><<<grid, kThreads, 0, stream>>>(p);
  return launch_status("silu_mul_backward_kernel", shape, stream);
}

Status rope_backward(const RopeBackwardParams& p, cudaStream_t stream) {
  auto shape = [&] { return "tokens=" + std::to_string(p.tokens) + " q_heads=" + std::to_string(p.q_heads) +
                            " kv_heads=" + std::to_string(p.kv_heads) + " rotary_dim=" + std::to_string(p.rotary_dim); };
  if (p.tokens == 0 || p.rotary_dim == 0) return {};
  if (p.tokens > 0x7fffffff) return invalid_argument("rope_backward_kernel: too many tokens (" + shape() + ")");
  rope_backward_kernel<<<static_cast<unsigned>(p.tokens), 128, 0, stream>>>(p);
  return launch_status("rope_backward_kernel", shape, stream);
}

}  // namespace kiln::cuda
