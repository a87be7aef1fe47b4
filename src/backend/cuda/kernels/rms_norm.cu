#include <string>
#include <type_traits>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/reduce.cuh"
#include "backend/cuda/kernels/rms_norm.h"
#include "backend/cuda/kernels/store_as.cuh"

namespace kiln::cuda {

namespace {

__device__ __forceinline__ float4 add4(float4 a, float4 b) { return make_float4(a.x + b.x, a.y + b.y, a.z + b.z, a.w + b.w); }

__device__ __forceinline__ float norm1(RmsKind kind, float v, float inv, float w, float g) {
  switch (kind) {
    case RmsKind::kOnePlus: return v * inv * (1.f + w);
    case RmsKind::kPlain: return v * inv * w;
    case RmsKind::kGated: return w * (v * inv) * (g / (1.f + expf(-g)));
  }
  return 0.f;
}

// One block per row. Each thread touches the same columns in both passes, so x may alias out.
// O: the output's element type (store_as.cuh).
template <typename O>
__global__ void rms_norm_kernel(RmsNormParams p) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const float* x = p.x.row(row);
  float* res = p.residual.ptr ? p.residual.row(row) : nullptr;
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
  O* y = static_cast<O*>(p.out.ptr) + row * p.out.stride;
  const float* z = p.gate.ptr ? p.gate.row(row) : nullptr;
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x)
    store_as(y + j, norm1(p.kind, src[j], inv, p.weight[j], z ? z[j] : 0.f));
}

// Rows of at most 4 * 1024 columns, every pointer and stride a multiple of 4 floats: a thread
// holds one float4 of the row in registers from the load to the store, so a row costs one
// round trip to memory per operand instead of one per pass and column stride (a decode step's
// single rows were latency-bound in the loop above).
template <typename O>
__global__ void rms_norm_vec4_kernel(RmsNormParams p) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const int j = threadIdx.x;
  const bool in = j < p.width / 4;
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  if (in) {
    v = reinterpret_cast<const float4*>(p.x.row(row))[j];
    if (p.residual.ptr) {
      float4* res = reinterpret_cast<float4*>(p.residual.row(row)) + j;
      v = add4(*res, v);
      *res = v;
    }
  }
  const float ss = block_sum(v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w, scratch);
  const float inv = 1.f / sqrtf(ss / static_cast<float>(p.width) + p.eps);
  if (!in) return;
  const float4 w = reinterpret_cast<const float4*>(p.weight)[j];
  float4 g = make_float4(0.f, 0.f, 0.f, 0.f);
  if (p.kind == RmsKind::kGated) g = reinterpret_cast<const float4*>(p.gate.row(row))[j];
  const float4 y = make_float4(norm1(p.kind, v.x, inv, w.x, g.x), norm1(p.kind, v.y, inv, w.y, g.y),
                               norm1(p.kind, v.z, inv, w.z, g.z), norm1(p.kind, v.w, inv, w.w, g.w));
  O* out = static_cast<O*>(p.out.ptr) + row * p.out.stride + 4 * j;
  if constexpr (std::is_same_v<O, float>) {
    *reinterpret_cast<float4*>(out) = y;
  } else {
    store_as(out, y.x);
    store_as(out + 1, y.y);
    store_as(out + 2, y.z);
    store_as(out + 3, y.w);
  }
}

// Rows narrower than 256 columns (the GDN gated norm's rows of dv = 128, 32 of them a token)
// where the loop above would run one block of 64 threads a row: a warp a row, kNarrowRows rows a
// block. Lane l does the work of the loop's threads l and l + 32 (columns l + 64 i and l + 32 +
// 64 i, in the same order) and adds their two warp sums as block_sum adds the loop's two warps,
// so the arithmetic is the loop's. 131,072 one-row blocks of 64 threads took 160 us for a
// 4,096-token GDN layer, against ~50 us of traffic.
constexpr int kNarrowRows = 8;

template <typename O>
__global__ void __launch_bounds__(kNarrowRows * 32) rms_norm_narrow_kernel(RmsNormParams p) {
  pdl_begin();
  const int lane = threadIdx.x & 31;
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kNarrowRows + (threadIdx.x >> 5);
  if (row >= p.rows) return;
  const float* x = p.x.row(row);
  float* res = p.residual.ptr ? p.residual.row(row) : nullptr;
  float half[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float ss = 0.f;
    for (int64_t j = lane + 32 * h; j < p.width; j += 64) {
      float v = x[j];
      if (res) {
        v = res[j] + v;
        res[j] = v;
      }
      ss += v * v;
    }
    half[h] = warp_sum(ss);
  }
  const float inv = 1.f / sqrtf((half[0] + half[1]) / static_cast<float>(p.width) + p.eps);
  const float* src = res ? res : x;
  O* y = static_cast<O*>(p.out.ptr) + row * p.out.stride;
  const float* z = p.gate.ptr ? p.gate.row(row) : nullptr;
#pragma unroll
  for (int h = 0; h < 2; ++h)
    for (int64_t j = lane + 32 * h; j < p.width; j += 64)
      store_as(y + j, norm1(p.kind, src[j], inv, p.weight[j], z ? z[j] : 0.f));
}

constexpr int64_t kVec4MaxRows = 64;

bool aligned4(const void* ptr, int64_t stride) {
  return reinterpret_cast<uintptr_t>(ptr) % 16 == 0 && stride % 4 == 0;
}

template <typename T>
bool aligned4(Rows<T> rows) {
  return aligned4(rows.ptr, rows.stride);
}

}  // namespace

Status rms_norm(const RmsNormParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " width=" + std::to_string(p.width) + " out " +
           std::string(dtype_name(p.out_dtype));
  };
  if (p.rows == 0) return {};
  if (!store_dtype_supported(p.out_dtype))
    return invalid_argument("rms_norm_kernel: the output must be f32, bf16 or f16 (" + shape() + ")");
  if (p.rows > 0x7fffffff) return invalid_argument("rms_norm_kernel: too many rows (" + shape() + ")");
  // The float4 form is for short batches (decode), whose rows were latency-bound chains of
  // loads in the loop; long batches have blocks enough in flight and keep the loop. The training
  // tests' references were taken with the loop: on their random tiny f32 model, the f32 hybrid
  // gradient check moves from 1.45e-3 to 1.96e-2 L2 when only this summation order changes
  // (docs/training.md).
  const bool out_aligned = p.out_dtype != DType::kF32 || aligned4(p.out);  // 16-bit: stored one by one
  const bool vec4 = p.rows <= kVec4MaxRows && p.width % 4 == 0 && p.width <= 4 * 1024 &&
                    aligned4(p.x) && out_aligned &&
                    aligned4(p.weight, 0) && (!p.residual.ptr || aligned4(p.residual)) &&
                    (p.kind != RmsKind::kGated || aligned4(p.gate));
  if (vec4) {
    const int threads = static_cast<int>((p.width / 4 + 31) / 32 * 32);
    with_store_type(p.out_dtype, [&](auto out) {
      launch_pdl(rms_norm_vec4_kernel<std::remove_pointer_t<decltype(out)>>, static_cast<unsigned>(p.rows), threads, 0,
                 stream, p);
    });
    return launch_status("rms_norm_kernel", shape, stream);
  }
  if (p.width < 256) {  // the loop's 64-thread rows, a warp each
    with_store_type(p.out_dtype, [&](auto out) {
      launch_pdl(rms_norm_narrow_kernel<std::remove_pointer_t<decltype(out)>>,
                 static_cast<unsigned>((p.rows + kNarrowRows - 1) / kNarrowRows), kNarrowRows * 32, 0, stream, p);
    });
    return launch_status("rms_norm_narrow_kernel", shape, stream);
  }
  const int threads = p.width >= 1024 ? 256 : 128;
  with_store_type(p.out_dtype, [&](auto out) {
    launch_pdl(rms_norm_kernel<std::remove_pointer_t<decltype(out)>>, static_cast<unsigned>(p.rows), threads, 0,
               stream, p);
  });
  return launch_status("rms_norm_kernel", shape, stream);
}

}  // namespace kiln::cuda
