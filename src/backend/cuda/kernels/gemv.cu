#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/kernels/gemv.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/vec8.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
// Iterations of a thread's k loop whose weight chunks it prefetches into L2 before waiting on
// its predecessor (programmatic dependent launch, pdl.cuh).
constexpr int kPrefetchChunks = 4;

// Weights are read once: keep them out of L1 so that x stays there.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 r;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
               : "l"(p));
  return r;
}

// A warp owns R consecutive weight rows (of any segments: each row finds its own weight and
// output); its lanes take the 8-wide k chunks lane, lane + 32, ... for every m (several chunks'
// loads in flight through the unrolled loop), and a warp reduction finishes each of the M x R
// dot products: no shared memory, no block barrier.
template <bool kBF16, int M, int R>
__global__ void __launch_bounds__(kThreads) gemv_kernel(GemvParams p, int64_t total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t n0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (n0 >= total) return;
  const int64_t chunks = p.k >> 3;
  const uint4* wrow[R];
  float* orow[R];
  int64_t ostride[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    int64_t n = n0 + r < total ? n0 + r : total - 1;  // the last warp re-reads the last row
    int s = 0;
    while (s + 1 < p.segments && n >= p.seg[s].n) n -= p.seg[s++].n;
    wrow[r] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.seg[s].w) + n * p.k);
    orow[r] = p.seg[s].out.ptr + n;
    ostride[r] = p.seg[s].out.stride;
  }
  // Weights are never written by a kernel: start pulling the first chunks into L2 while the
  // predecessor (which writes x) finishes.
  for (int64_t c = lane, i = 0; c < chunks && i < kPrefetchChunks; c += 32, ++i)
#pragma unroll
    for (int r = 0; r < R; ++r) prefetch_l2(wrow[r] + c);
  pdl_begin();
  float acc[M][R];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[m][r] = 0.f;

#pragma unroll 4
  for (int64_t c = lane; c < chunks; c += 32) {
    uint4 raw[R];
#pragma unroll
    for (int r = 0; r < R; ++r) raw[r] = load_streaming(wrow[r] + c);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float4* xp = reinterpret_cast<const float4*>(p.x.row(m)) + 2 * c;
      const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        float wf[8];
        unpack8<kBF16>(raw[r], wf);
        acc[m][r] = dot8(wf, x0, x1, acc[m][r]);
      }
    }
  }
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float v = warp_sum(acc[m][r]);
      if (lane == m * R + r && n0 + r < total) {
        float* o = orow[r] + m * ostride[r];
        *o = p.accumulate ? *o + v : v;
      }
    }
}

// Block-split form for few rows (n < 4096) or larger m: a block of 256 threads owns 4 weight
// rows and its threads stride over k together (more loads in flight per row than a warp alone
// can have), then a warp-then-block reduction.
constexpr int kSplitRows = 4;

template <bool kBF16, int M>
__global__ void __launch_bounds__(kThreads) gemv_split_kernel(GemvParams p) {
  __shared__ float red[kWarps][M * kSplitRows];
  const GemvSegment& g = p.seg[0];  // one segment: launch_m sends groups to the warp form
  const int64_t n0 = static_cast<int64_t>(blockIdx.x) * kSplitRows;
  const int64_t chunks = p.k >> 3;
  const uint4* wrow[kSplitRows];
#pragma unroll
  for (int r = 0; r < kSplitRows; ++r) {
    const int64_t n = n0 + r < g.n ? n0 + r : g.n - 1;
    wrow[r] = reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(g.w) + n * p.k);
  }
  for (int64_t c = threadIdx.x, i = 0; c < chunks && i < kPrefetchChunks; c += kThreads, ++i)
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r) prefetch_l2(wrow[r] + c);
  pdl_begin();
  float acc[M][kSplitRows];
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r) acc[m][r] = 0.f;
#pragma unroll 2
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    float wf[kSplitRows][8];
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r) unpack8<kBF16>(load_streaming(wrow[r] + c), wf[r]);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const float4* xp = reinterpret_cast<const float4*>(p.x.row(m)) + 2 * c;
      const float4 x0 = __ldg(xp), x1 = __ldg(xp + 1);
#pragma unroll
      for (int r = 0; r < kSplitRows; ++r) acc[m][r] = dot8(wf[r], x0, x1, acc[m][r]);
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < M; ++m)
#pragma unroll
    for (int r = 0; r < kSplitRows; ++r) {
      const float v = warp_sum(acc[m][r]);
      if (lane == 0) red[warp][m * kSplitRows + r] = v;
    }
  __syncthreads();
  if (threadIdx.x < M * kSplitRows) {
    const int m = threadIdx.x / kSplitRows, r = threadIdx.x % kSplitRows;
    const int64_t n = n0 + r;
    if (n < g.n) {
      float s = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) s += red[w][threadIdx.x];
      float* o = g.out.row(m) + n;
      *o = p.accumulate ? *o + s : s;
    }
  }
}

// Rows per warp: enough warps to fill the device (~16 a multiprocessor), as many rows a warp as
// that allows (more 16-byte loads in flight each); larger m keeps R small for registers.
template <bool kBF16, int M>
void launch_m(const GemvParams& p, cudaStream_t stream) {
  const int64_t n = p.rows();
  if (p.segments == 1 && (M > 2 || (n < 4096 && p.rows_per_warp == 0) || p.rows_per_warp < 0)) {
    const unsigned blocks = static_cast<unsigned>((n + kSplitRows - 1) / kSplitRows);
    launch_pdl(gemv_split_kernel<kBF16, M>, blocks, kThreads, 0, stream, p);
    return;
  }
  const int64_t want_warps = int64_t{16} * (p.multiprocessors > 0 ? p.multiprocessors : 132);
  int r = 1;
  if (n >= 4 * want_warps && M <= 2) r = 4;
  else if (n >= 2 * want_warps) r = 2;
  if (p.rows_per_warp > 0) r = p.rows_per_warp == 4 && M > 2 ? 2 : p.rows_per_warp;
  const unsigned blocks = static_cast<unsigned>((n + int64_t{kWarps} * r - 1) / (int64_t{kWarps} * r));
  if constexpr (M <= 2) {
    if (r == 4) {
      launch_pdl(gemv_kernel<kBF16, M, 4>, blocks, kThreads, 0, stream, p, n);
      return;
    }
  }
  if (r == 2) launch_pdl(gemv_kernel<kBF16, M, 2>, blocks, kThreads, 0, stream, p, n);
  else launch_pdl(gemv_kernel<kBF16, M, 1>, blocks, kThreads, 0, stream, p, n);
}

template <bool kBF16>
void launch(const GemvParams& p, cudaStream_t stream) {
  switch (p.m) {
    case 1: launch_m<kBF16, 1>(p, stream); break;
    case 2: launch_m<kBF16, 2>(p, stream); break;
    case 3: launch_m<kBF16, 3>(p, stream); break;
    case 4: launch_m<kBF16, 4>(p, stream); break;
    case 5: launch_m<kBF16, 5>(p, stream); break;
    case 6: launch_m<kBF16, 6>(p, stream); break;
    case 7: launch_m<kBF16, 7>(p, stream); break;
    default: launch_m<kBF16, 8>(p, stream); break;
  }
}

}  // namespace

bool gemv_beats_cublaslt(int64_t m, int64_t n) { return m <= 2 || (m <= 4 && n <= 4096) || (m <= 8 && n <= 1024); }

bool gemv_applies(const GemvParams& p) {
  auto aligned16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.m < 1 || p.m > kGemvMaxM || p.k < 8 || p.k % 8 != 0) return false;
  if (p.segments < 1 || p.segments > kGemvMaxSegments || (p.segments > 1 && p.m > 2)) return false;
  if (p.w_dtype != DType::kBF16 && p.w_dtype != DType::kF16) return false;
  if (!aligned16(p.x.ptr) || (p.m > 1 && p.x.stride % 4 != 0)) return false;
  for (int s = 0; s < p.segments; ++s)
    if (p.seg[s].n < 1 || !aligned16(p.seg[s].w) || p.seg[s].out.ptr == nullptr) return false;
  return p.rows() / kSplitRows < 0x7fffffff;
}

Status gemv(const GemvParams& p, cudaStream_t stream) {
  if (!gemv_applies(p))
    return invalid_argument("gemv_kernel: unsupported arguments (m=" + std::to_string(p.m) + " n=" +
                            std::to_string(p.rows()) + " k=" + std::to_string(p.k) + " segments=" +
                            std::to_string(p.segments) + ")");
  if (p.w_dtype == DType::kBF16) launch<true>(p, stream);
  else launch<false>(p, stream);
  return launch_status(
      "gemv_kernel",
      [&] {
        return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.rows()) + " k=" + std::to_string(p.k) +
               " segments=" + std::to_string(p.segments);
      },
      stream);
}

}  // namespace kiln::cuda
