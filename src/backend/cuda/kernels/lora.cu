#include <cuda_fp16.h>

#include <algorithm>
#include <utility>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/lora.h"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/vec8.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;

// Eight consecutive values (chunk c of a row: 32 bytes of f32, 16 of bf16/f16) as f32; the row
// is 16-byte aligned.
template <DType W>
__device__ __forceinline__ void load8(const void* row, int64_t c, float (&f)[8]) {
  if constexpr (W == DType::kF32) {
    const float4* p = static_cast<const float4*>(row) + 2 * c;
    const float4 a = __ldg(p), b = __ldg(p + 1);
    f[0] = a.x; f[1] = a.y; f[2] = a.z; f[3] = a.w;
    f[4] = b.x; f[5] = b.y; f[6] = b.z; f[7] = b.w;
  } else {
    unpack8<W == DType::kBF16>(__ldg(static_cast<const uint4*>(row) + c), f);
  }
}

template <DType W>
__device__ __forceinline__ float load1(const void* base, int64_t i) {
  if constexpr (W == DType::kF32) {
    return __ldg(static_cast<const float*>(base) + i);
  } else {
    const unsigned short v = __ldg(static_cast<const unsigned short*>(base) + i);
    if constexpr (W == DType::kBF16) return __uint_as_float(static_cast<uint32_t>(v) << 16);
    else return __half2float(__ushort_as_half(v));
  }
}

// Row j of the segment's A against each of its tokens: the block's threads take the 8-wide k
// chunks threadIdx.x, + kThreads, ... (A read once, coalesced; a decode-sized k is one or a few
// chunks a thread, so the latency is a few loads, not a warp's walk over k); one accumulator a
// token in registers (T, the launch's longest segment rounded up, bounds them; the segment's own
// count guards the loads), then a warp and a block reduction in a fixed order.
template <DType W, int T>
__device__ __forceinline__ void shrink_row(const LoraParams& p, const LoraKernelSegment& s, int j) {
  __shared__ float red[kWarps][T];
  constexpr int64_t es = W == DType::kF32 ? 4 : 2;
  const void* row = static_cast<const char*>(s.a) + static_cast<int64_t>(j) * p.in * es;
  const float* x0 = p.x.row(s.begin);
  const int64_t chunks = p.in >> 3;
  float acc[T];
#pragma unroll
  for (int m = 0; m < T; ++m) acc[m] = 0.f;
  for (int64_t c = threadIdx.x; c < chunks; c += kThreads) {
    float w[8];
    load8<W>(row, c, w);
#pragma unroll
    for (int m = 0; m < T; ++m) {
      if (m < s.tokens) {
        const float4* xp = reinterpret_cast<const float4*>(x0 + m * p.x.stride) + 2 * c;
        acc[m] = dot8(w, __ldg(xp), __ldg(xp + 1), acc[m]);
      }
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
#pragma unroll
  for (int m = 0; m < T; ++m) {
    const float v = warp_sum(acc[m]);
    if (lane == 0) red[warp][m] = v;
  }
  __syncthreads();
  if (threadIdx.x < s.tokens) {
    float v = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) v += red[w][threadIdx.x];
    p.u[s.u_offset + static_cast<int64_t>(threadIdx.x) * s.rank + j] = s.coef * v;
  }
}

// grid: x the rank rows (up to the largest rank), y the segments; a block per (segment, j).
template <int T>
__global__ void __launch_bounds__(kThreads) lora_shrink_kernel(const __grid_constant__ LoraParams p) {
  const LoraKernelSegment& s = p.seg[blockIdx.y];
  const int j = static_cast<int>(blockIdx.x);
  if (j >= s.rank) return;  // the whole block: no barrier is skipped by part of it
  switch (s.a_dtype) {
    case DType::kBF16: shrink_row<DType::kBF16, T>(p, s, j); break;
    case DType::kF16: shrink_row<DType::kF16, T>(p, s, j); break;
    default: shrink_row<DType::kF32, T>(p, s, j); break;
  }
}

// u [rank] . B[o, :rank]: 8 at a time where the segment allows it (rank % 8 == 0, B and u
// 16-byte aligned), else one at a time.
template <DType W>
__device__ __forceinline__ float expand_dot(const LoraKernelSegment& s, const float* u, int64_t o) {
  float d = 0.f;
  if (s.b_vector) {
    constexpr int64_t es = W == DType::kF32 ? 4 : 2;
    const void* row = static_cast<const char*>(s.b) + o * s.rank * es;
    const float4* u4 = reinterpret_cast<const float4*>(u);
    for (int c = 0; c < (s.rank >> 3); ++c) {
      float w[8];
      load8<W>(row, c, w);
      d = dot8(w, __ldg(u4 + 2 * c), __ldg(u4 + 2 * c + 1), d);
    }
  } else {
    for (int j = 0; j < s.rank; ++j) d = fmaf(load1<W>(s.b, o * s.rank + j), __ldg(u + j), d);
  }
  return d;
}

// grid: x covers out kThreads columns a block, y the rows of the spans. A thread owns one output
// element and adds every covering segment's delta in segment order.
__global__ void __launch_bounds__(kThreads) lora_expand_kernel(const __grid_constant__ LoraParams p) {
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (o >= p.out) return;
  const int row = static_cast<int>(blockIdx.y);
  int sp = 0;
  while (sp + 1 < p.spans && row >= p.span_row[sp + 1]) ++sp;
  const int t = p.span_begin[sp] + (row - p.span_row[sp]);
  float* y = p.y.row(t) + o;
  float acc = *y;
  for (int i = 0; i < p.segments; ++i) {
    const LoraKernelSegment& s = p.seg[i];
    const int k = t - s.begin;
    if (k < 0 || k >= s.tokens) continue;
    const float* u = p.u + s.u_offset + static_cast<int64_t>(k) * s.rank;
    float d;
    switch (s.b_dtype) {
      case DType::kBF16: d = expand_dot<DType::kBF16>(s, u, o); break;
      case DType::kF16: d = expand_dot<DType::kF16>(s, u, o); break;
      default: d = expand_dot<DType::kF32>(s, u, o); break;
    }
    acc += d;
  }
  *y = acc;
}

bool aligned16(const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; }
bool float_dtype(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

}  // namespace

void lora_plan_spans(LoraParams& p) {
  std::pair<int32_t, int32_t> r[kLoraMaxSegments];  // [begin, end) of each segment
  const int n = std::clamp(p.segments, 0, kLoraMaxSegments);
  for (int i = 0; i < n; ++i) r[i] = {p.seg[i].begin, p.seg[i].begin + p.seg[i].tokens};
  std::sort(r, r + n);
  p.spans = 0;
  p.span_row[0] = 0;
  int32_t end = 0;
  for (int i = 0; i < n; ++i) {
    if (p.spans > 0 && r[i].first <= end) {  // overlaps or touches the open span: extend it
      end = std::max(end, r[i].second);
    } else {
      if (p.spans > 0) p.span_row[p.spans] = p.span_row[p.spans - 1] + (end - p.span_begin[p.spans - 1]);
      p.span_begin[p.spans++] = r[i].first;
      end = r[i].second;
    }
  }
  if (p.spans > 0) p.span_row[p.spans] = p.span_row[p.spans - 1] + (end - p.span_begin[p.spans - 1]);
}

bool lora_segment_applies(const LoraKernelSegment& s) {
  return s.tokens >= 1 && s.tokens <= kLoraMaxTokens && s.rank >= 1 && aligned16(s.a) && s.b != nullptr &&
         float_dtype(s.a_dtype) && float_dtype(s.b_dtype);
}

bool lora_rows_apply(const float* x, int64_t x_stride, int64_t in) {
  return in >= 8 && in % 8 == 0 && aligned16(x) && x_stride % 4 == 0;
}

Status lora_shrink_expand(const LoraParams& p, cudaStream_t stream) {
  const auto shape = [&] {
    return "segments=" + std::to_string(p.segments) + " in=" + std::to_string(p.in) + " out=" + std::to_string(p.out);
  };
  const int rows = p.spans >= 1 && p.spans <= kLoraMaxSegments ? p.span_row[p.spans] : 0;
  if (p.segments < 1 || p.segments > kLoraMaxSegments || rows < 1 || rows > 65535 || p.out < 1 ||
      !lora_rows_apply(p.x.ptr, p.x.stride, p.in) || p.u == nullptr || p.y.ptr == nullptr)
    return invalid_argument("lora_shrink_expand: unsupported arguments (" + shape() + " rows=" + std::to_string(rows) + ")");
  int max_rank = 0, max_tokens = 0;
  for (int i = 0; i < p.segments; ++i) {
    if (!lora_segment_applies(p.seg[i]) || p.seg[i].u_offset % 4 != 0)
      return invalid_argument("lora_shrink_expand: segment " + std::to_string(i) + " does not apply (" + shape() + ")");
    max_rank = std::max(max_rank, p.seg[i].rank);
    max_tokens = std::max(max_tokens, p.seg[i].tokens);
  }
  if (max_rank > 65535)
    return invalid_argument("lora_shrink_expand: rank " + std::to_string(max_rank) + " over 65535 (" + shape() + ")");
  // Accumulators for the longest segment only: decode batches (one token a segment) keep few
  // registers and the SMs full.
  const dim3 shrink_grid(static_cast<unsigned>(max_rank), static_cast<unsigned>(p.segments));
  if (max_tokens <= 1) lora_shrink_kernel<1><<<shrink_grid, kThreads, 0, stream>>>(p);
  else if (max_tokens <= 2) lora_shrink_kernel<2><<<shrink_grid, kThreads, 0, stream>>>(p);
  else if (max_tokens <= 4) lora_shrink_kernel<4><<<shrink_grid, kThreads, 0, stream>>>(p);
  else if (max_tokens <= 8) lora_shrink_kernel<8><<<shrink_grid, kThreads, 0, stream>>>(p);
  else lora_shrink_kernel<kLoraMaxTokens><<<shrink_grid, kThreads, 0, stream>>>(p);
  KILN_RETURN_IF_ERROR(launch_status("lora_shrink_kernel", shape, stream));
  const dim3 expand_grid(static_cast<unsigned>((p.out + kThreads - 1) / kThreads), static_cast<unsigned>(rows));
  lora_expand_kernel<<<expand_grid, kThreads, 0, stream>>>(p);
  return launch_status("lora_expand_kernel", shape, stream);
}

}  // namespace kiln::cuda
