// The thin f32 products (thin_gemm.h).
#include <algorithm>
#include <string>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/thin_gemm.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kRankTile = 16;                           // r columns a block (grid.y or grid.z)
constexpr int kRowsPerWarp = 4, kRowsPerBlock = 32;     // shrink: 8 warps of 4 rows of x
constexpr int kValues = kRowsPerWarp * kRankTile;       // a shrink lane's partial sums
constexpr int kStageRows = 64;                          // reduce: rows of u staged at a time

__device__ __forceinline__ float4 ld4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// One step of the lanes' reduce-scatter: of the first N values, a lane keeps the upper half
// where bit `off` of its lane id is set (else the lower), adds the partner's copy of that half,
// and holds the sums in v[0, N/2). After the steps 16, 8, 4, 2, 1 lane L holds the full sums of
// values 2L and 2L + 1.
template <int N>
__device__ __forceinline__ void halve(float (&v)[kValues], int lane, int off) {
  const bool up = (lane & off) != 0;
#pragma unroll
  for (int i = 0; i < N / 2; ++i) {
    const float send = up ? v[i] : v[i + N / 2];
    const float keep = up ? v[i + N / 2] : v[i];
    v[i] = keep + __shfl_xor_sync(0xffffffffu, send, off);
  }
}

__device__ __forceinline__ float fma4(const float4& x, const float4& b, float acc) {
  return fmaf(x.w, b.w, fmaf(x.z, b.z, fmaf(x.y, b.y, fmaf(x.x, b.x, acc))));
}

__device__ __forceinline__ float part(const float4& v, int j) { return j == 0 ? v.x : j == 1 ? v.y : j == 2 ? v.z : v.w; }

// Grid: (ceil(m / 32), ceil(r / 16)). v[i * 16 + c]: row i of the warp, column r0 + c.
template <bool BRows>
__global__ void __launch_bounds__(kThreads) thin_shrink_kernel(ThinShrinkParams p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + warp * kRowsPerWarp;
  if (row0 >= p.m) return;  // the whole warp (the kernel has no block barrier)
  const int r0 = blockIdx.y * kRankTile;
  const int rn = p.r - r0 < kRankTile ? static_cast<int>(p.r - r0) : kRankTile;  // a multiple of 4
  const float* xr[kRowsPerWarp];
#pragma unroll
  for (int i = 0; i < kRowsPerWarp; ++i) xr[i] = p.x + (row0 + i < p.m ? row0 + i : p.m - 1) * p.ldx;  // past m: never written

  float v[kValues];
#pragma unroll
  for (int i = 0; i < kValues; ++i) v[i] = 0.f;
  for (int64_t k = 4 * lane; k < p.k; k += 128) {
    float4 xv[kRowsPerWarp];
#pragma unroll
    for (int i = 0; i < kRowsPerWarp; ++i) xv[i] = ld4(xr[i] + k);
    if constexpr (BRows) {
#pragma unroll
      for (int c = 0; c < kRankTile; ++c) {
        if (c < rn) {
          const float4 bv = ld4(p.b + (r0 + c) * p.ldb + k);
#pragma unroll
          for (int i = 0; i < kRowsPerWarp; ++i) v[i * kRankTile + c] = fma4(xv[i], bv, v[i * kRankTile + c]);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float* brow = p.b + (k + j) * p.ldb + r0;
#pragma unroll
        for (int q = 0; q < kRankTile / 4; ++q) {
          if (4 * q < rn) {
            const float4 bv = ld4(brow + 4 * q);
#pragma unroll
            for (int i = 0; i < kRowsPerWarp; ++i) {
              const float xs = part(xv[i], j);
              float* a = v + i * kRankTile + 4 * q;
              a[0] = fmaf(xs, bv.x, a[0]);
              a[1] = fmaf(xs, bv.y, a[1]);
              a[2] = fmaf(xs, bv.z, a[2]);
              a[3] = fmaf(xs, bv.w, a[3]);
            }
          }
        }
      }
    }
  }
  halve<64>(v, lane, 16);
  halve<32>(v, lane, 8);
  halve<16>(v, lane, 4);
  halve<8>(v, lane, 2);
  halve<4>(v, lane, 1);
  const int64_t row = row0 + lane / 8;
  const int col = 2 * (lane % 8);  // rn is even, so col + 1 < rn too
  if (row < p.m && col < rn) {
    float* o = p.out + row * p.ldo + r0 + col;
    float o0 = p.alpha * v[0], o1 = p.alpha * v[1];
    if (p.accumulate) {
      o0 += o[0];
      o1 += o[1];
    }
    o[0] = o0;
    o[1] = o1;
  }
}

// Grid: (ceil(n / 256), splits, ceil(r / 16)); thread = a column of y over the split's rows.
// partial[split][r][n].
__global__ void __launch_bounds__(kThreads) thin_reduce_kernel(ThinReduceParams p, int64_t rows_per_split) {
  __shared__ float4 staged4[kStageRows * kRankTile / 4];
  float* us = reinterpret_cast<float*>(staged4);  // [kStageRows][kRankTile]
  const int tid = threadIdx.x;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kThreads + tid;
  const int64_t split = blockIdx.y;
  const int r0 = blockIdx.z * kRankTile;
  const int64_t m0 = split * rows_per_split, m1 = m0 + rows_per_split < p.m ? m0 + rows_per_split : p.m;
  float acc[kRankTile];
#pragma unroll
  for (int c = 0; c < kRankTile; ++c) acc[c] = 0.f;
  for (int64_t mb = m0; mb < m1; mb += kStageRows) {
    const int rows = m1 - mb < kStageRows ? static_cast<int>(m1 - mb) : kStageRows;
    __syncthreads();  // the previous rows are consumed
    for (int e = tid; e < kStageRows * kRankTile; e += kThreads) {
      const int rr = e / kRankTile, c = e % kRankTile;
      us[e] = rr < rows && r0 + c < p.r ? p.u[(mb + rr) * p.ldu + r0 + c] : 0.f;
    }
    __syncthreads();
    if (n < p.n) {
      const float* yc = p.y + mb * p.ldy + n;
#pragma unroll 8
      for (int rr = 0; rr < rows; ++rr) {
        const float yv = __ldg(yc + rr * p.ldy);
#pragma unroll
        for (int c = 0; c < kRankTile; ++c) acc[c] = fmaf(yv, us[rr * kRankTile + c], acc[c]);
      }
    }
  }
  if (n < p.n) {
#pragma unroll
    for (int c = 0; c < kRankTile; ++c)
      if (r0 + c < p.r) p.partial[(split * p.r + r0 + c) * p.n + n] = acc[c];
  }
}

// A thread per output element (r-major index e = rr * n + col): the splits summed in order.
__global__ void __launch_bounds__(kThreads) thin_reduce_finish_kernel(ThinReduceParams p) {
  const int64_t e = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (e >= p.r * p.n) return;
  const int64_t rr = e / p.n, col = e % p.n;
  float s = 0.f;
  for (int sp = 0; sp < p.splits; ++sp) s += p.partial[sp * p.r * p.n + e];
  float* o = p.r_major ? p.out + rr * p.ldo + col : p.out + col * p.ldo + rr;
  *o = p.accumulate ? p.alpha * s + *o : p.alpha * s;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

}  // namespace

bool thin_shrink_applies(const ThinShrinkParams& p) {
  return p.m >= 1 && p.k >= 4 && p.r >= 1 && p.r <= kThinMaxRank && p.r % 4 == 0 && p.k % 4 == 0 &&
         ceil_div(p.m, kRowsPerBlock) <= 0x7fffffff && rows_aligned(p.x, p.ldx * 4, 16) &&
         rows_aligned(p.b, p.ldb * 4, 16);
}

Status thin_shrink(const ThinShrinkParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "m=" + std::to_string(p.m) + " k=" + std::to_string(p.k) + " r=" + std::to_string(p.r) +
           (p.b_rows ? " b [r, k]" : " b [k, r]");
  };
  if (!thin_shrink_applies(p))
    return invalid_argument("thin_shrink_kernel: needs r in 1..64 with r % 4 == 0, k % 4 == 0 and 16-byte aligned rows (" +
                            shape() + ")");
  const dim3 grid(static_cast<unsigned>(ceil_div(p.m, kRowsPerBlock)), static_cast<unsigned>(ceil_div(p.r, kRankTile)));
  if (p.b_rows) thin_shrink_kernel<true><<<grid, kThreads, 0, stream>>>(p);
  else thin_shrink_kernel<false><<<grid, kThreads, 0, stream>>>(p);
  return launch_status("thin_shrink_kernel", shape, stream);
}

bool thin_reduce_applies(const ThinReduceParams& p) {
  return p.m >= 0 && p.n >= 1 && p.r >= 1 && p.r <= kThinMaxRank && ceil_div(p.n, kThreads) <= 0x7fffffff;
}

void thin_reduce_plan(ThinReduceParams& p, int sm_count) {
  const int64_t blocks = ceil_div(p.n, kThreads) * ceil_div(p.r, kRankTile);
  const int64_t want = ceil_div(2 * std::max(sm_count, 1), blocks);  // about two blocks an SM
  p.splits = static_cast<int>(std::clamp<int64_t>(want, 1, std::clamp<int64_t>(ceil_div(p.m, kStageRows), 1, 65535)));
}

Status thin_reduce(const ThinReduceParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " r=" + std::to_string(p.r) +
           " splits=" + std::to_string(p.splits) + (p.r_major ? " out [r, n]" : " out [n, r]");
  };
  if (!thin_reduce_applies(p) || p.splits < 1 || p.partial == nullptr)
    return invalid_argument("thin_reduce_kernel: needs r in 1..64, n >= 1, a plan and its scratch (" + shape() + ")");
  const int64_t rows_per_split = std::max<int64_t>(ceil_div(p.m, p.splits), 1);
  const dim3 grid(static_cast<unsigned>(ceil_div(p.n, kThreads)), static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(ceil_div(p.r, kRankTile)));
  thin_reduce_kernel<<<grid, kThreads, 0, stream>>>(p, rows_per_split);
  KILN_RETURN_IF_ERROR(launch_status("thin_reduce_kernel", shape, stream));
  thin_reduce_finish_kernel<<<grid_blocks(p.r * p.n, kThreads, 0x7fffffff), kThreads, 0, stream>>>(p);
  return launch_status("thin_reduce_finish_kernel", shape, stream);
}

}  // namespace kiln::cuda
