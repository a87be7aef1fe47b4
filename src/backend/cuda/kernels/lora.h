// The LoRA deltas of short token segments (decode rows, each its own adapter) in two launches,
// whatever the number of segments: shrink, u[seg][t, j] = coef * x[t] . A[j] (a block per
// (segment, j), reading A's row once in 16-byte loads for all of the segment's tokens), then
// expand, out[t, o] += sum over the segments covering t of u[seg][t] . B[o] (a thread per output
// element summing the segments in order: no atomics, stacked adapters add deterministically).
// The segment table travels inside the parameters (no host-to-device copy, so a launch can be
// captured in a CUDA graph); sm_90 with CUDA 12.1+ takes kernel parameters of up to 32 KB.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/strided.h"
#include "core/dtype.h"
#include "core/status.h"

namespace kiln::cuda {

constexpr int kLoraMaxSegments = 128;  // per launch pair; more segments take several
constexpr int kLoraMaxTokens = 16;     // per segment: the shrink keeps one accumulator a token

// One adapter term over rows [begin, begin + tokens) of x and out.
struct LoraKernelSegment {
  const void* a = nullptr;  // [rank, in] contiguous, 16-byte aligned
  const void* b = nullptr;  // [out, rank] contiguous
  int32_t begin = 0, tokens = 0;
  int32_t rank = 0;
  int32_t u_offset = 0;  // its u [tokens, rank] f32 starts at LoraParams::u + u_offset (a multiple of 4)
  float coef = 1.f;
  DType a_dtype = DType::kF32, b_dtype = DType::kF32;
  bool b_vector = false;  // rank % 8 == 0 and b 16-byte aligned: B rows and u in 16-byte loads
};

struct LoraParams {
  int64_t in = 0, out = 0;
  Rows<const float> x;  // [tokens, in]; rows 16-byte aligned, in % 8 == 0
  Rows<float> y;  // [tokens, out]: the projection's output
  float* u = nullptr;                              // scratch: every segment's [tokens, rank]
  int segments = 0;
  LoraKernelSegment seg[kLoraMaxSegments];
  // The expand's grid rows: the union of the segments' tokens as disjoint spans in token order;
  // span s holds rows [span_row[s], span_row[s + 1]), the first at token span_begin[s].
  int spans = 0;
  int32_t span_begin[kLoraMaxSegments];
  int32_t span_row[kLoraMaxSegments + 1];
};

// Fills the spans of p's segments (p.segments set, each tokens >= 1).
void lora_plan_spans(LoraParams& p);
// Whether a segment can go to the kernels: 1..kLoraMaxTokens tokens, A 16-byte aligned, float
// dtypes; the call-wide conditions (in % 8 == 0, x rows 16-byte aligned) are lora_rows_apply's.
bool lora_segment_applies(const LoraKernelSegment& s);
bool lora_rows_apply(const float* x, int64_t x_stride, int64_t in);
// The shrink and the expand over p's segments (spans planned, u sized): two launches.
Status lora_shrink_expand(const LoraParams& p, cudaStream_t stream);

}  // namespace kiln::cuda
