#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <string>
#include <type_traits>

#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"

namespace kiln::cuda {

namespace {

__device__ __forceinline__ float load_float(const void* base, int64_t i, DType t) {
  switch (t) {
    case DType::kBF16: return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return __half2float(static_cast<const __half*>(base)[i]);
    default: return static_cast<const float*>(base)[i];
  }
}

__global__ void embedding_kernel(EmbeddingParams p) {
  pdl_begin();
  const int64_t t = blockIdx.x;
  const int64_t id = p.ids[t];
  float* o = p.out.row(t);
  const bool valid = id >= 0 && id < p.vocab;
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x)
    o[j] = valid ? load_float(p.table.ptr, id * p.table.stride + j, p.table_dtype) : __int_as_float(0x7fc00000);
}

__device__ __forceinline__ uint16_t to_half_bits(float x, DType t) {
  return t == DType::kBF16 ? __bfloat16_as_ushort(__float2bfloat16_rn(x)) : __half_as_ushort(__float2half_rn(x));
}

// Grid: (column blocks, rows). V = 4: columns four at a time (width % 4 == 0, rows aligned).
// O: float, or uint16_t for a bf16/f16 output (p.out_dtype), each result rounded as it is stored.
template <ElementwiseOp Op, int V, typename O>
__global__ void binary_kernel(BinaryParams p) {
  pdl_begin();
  const int64_t groups = p.width / V;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* a = p.a.row(r);
    const float* b = p.b.row(r);
    O* o = static_cast<O*>(p.out.ptr) + r * p.out.stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if constexpr (V == 4) {
        const float4 x = reinterpret_cast<const float4*>(a)[j], y = reinterpret_cast<const float4*>(b)[j];
        const float4 v = make_float4(apply<Op>(x.x, y.x), apply<Op>(x.y, y.y), apply<Op>(x.z, y.z), apply<Op>(x.w, y.w));
        if constexpr (std::is_same_v<O, float>) {
          reinterpret_cast<float4*>(o)[j] = v;
        } else {
          uint2 w;
          w.x = to_half_bits(v.x, p.out_dtype) | (static_cast<uint32_t>(to_half_bits(v.y, p.out_dtype)) << 16);
          w.y = to_half_bits(v.z, p.out_dtype) | (static_cast<uint32_t>(to_half_bits(v.w, p.out_dtype)) << 16);
          reinterpret_cast<uint2*>(o)[j] = w;
        }
      } else {
        const float v = apply<Op>(a[j], b[j]);
        if constexpr (std::is_same_v<O, float>) o[j] = v;
        else o[j] = to_half_bits(v, p.out_dtype);
      }
    }
  }
}

// V = 4: four columns a thread (cols % 4 == 0, source rows 16-byte and destination rows 8-byte aligned).
template <int V>
__global__ void convert_kernel(ConvertParams p) {
  pdl_begin();
  const int64_t groups = p.cols / V;
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* s = p.src + r * p.src_stride;
    uint16_t* d = static_cast<uint16_t*>(p.dst) + r * p.dst_stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < groups;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if constexpr (V == 4) {
        const float4 x = reinterpret_cast<const float4*>(s)[j];
        uint2 w;
        w.x = to_half_bits(x.x, p.dst_dtype) | (static_cast<uint32_t>(to_half_bits(x.y, p.dst_dtype)) << 16);
        w.y = to_half_bits(x.z, p.dst_dtype) | (static_cast<uint32_t>(to_half_bits(x.w, p.dst_dtype)) << 16);
        reinterpret_cast<uint2*>(d)[j] = w;
      } else {
        d[j] = to_half_bits(s[j], p.dst_dtype);
      }
    }
  }
}

std::string rows_shape(int64_t rows, int64_t width) {
  return "rows=" + std::to_string(rows) + " width=" + std::to_string(width);
}

dim3 row_grid(int64_t rows, int64_t width, int threads) {
  return dim3(grid_blocks(width, threads, 1024), grid_blocks(rows, 1, 65535));
}

}  // namespace

Status embedding(const EmbeddingParams& p, cudaStream_t stream) {
  auto shape = [&] { return rows_shape(p.tokens, p.width) + " vocab=" + std::to_string(p.vocab) + " table=" +
                            std::string(dtype_name(p.table_dtype)); };
  if (p.tokens == 0) return {};
  launch_pdl(embedding_kernel, static_cast<unsigned>(p.tokens), 256, 0, stream, p);
  return launch_status("embedding_kernel", shape, stream);
}

Status binary(const BinaryParams& p, cudaStream_t stream) {
  const BinaryOpInfo* info = binary_op_info(p.op);
  auto shape = [&] {
    return std::string(info != nullptr ? info->name : "embed") + " " + rows_shape(p.rows, p.width) + " out " +
           std::string(dtype_name(p.out_dtype));
  };
  if (info == nullptr) return invalid_argument("binary_kernel: not a binary op (" + shape() + ")");
  if (p.rows == 0 || p.width == 0) return {};
  const bool f32 = p.out_dtype == DType::kF32;
  if (!f32 && p.out_dtype != DType::kBF16 && p.out_dtype != DType::kF16)
    return invalid_argument("binary_kernel: the output must be f32, bf16 or f16 (" + shape() + ")");
  const int64_t out_bytes = f32 ? 4 : 2;
  const bool vec4 = p.width % 4 == 0 && rows_aligned(p.a.ptr, p.a.stride * 4, 16) &&
                    rows_aligned(p.b.ptr, p.b.stride * 4, 16) &&
                    rows_aligned(p.out.ptr, p.out.stride * out_bytes, 4 * out_bytes);
  with_binary_op(p.op, [&](auto op) {
    constexpr ElementwiseOp Op = decltype(op)::value;
    const dim3 grid = row_grid(p.rows, vec4 ? p.width / 4 : p.width, 256);
    if (vec4 && f32) launch_pdl(binary_kernel<Op, 4, float>, grid, 256, 0, stream, p);
    else if (vec4) launch_pdl(binary_kernel<Op, 4, uint16_t>, grid, 256, 0, stream, p);
    else if (f32) launch_pdl(binary_kernel<Op, 1, float>, grid, 256, 0, stream, p);
    else launch_pdl(binary_kernel<Op, 1, uint16_t>, grid, 256, 0, stream, p);
  });
  return launch_status(vec4 ? "binary_kernel<4>" : "binary_kernel", shape, stream);
}

Status convert_f32(const ConvertParams& p, cudaStream_t stream) {
  auto shape = [&] { return rows_shape(p.rows, p.cols) + " to " + std::string(dtype_name(p.dst_dtype)); };
  if (p.rows == 0 || p.cols == 0) return {};
  if (p.cols % 4 == 0 && rows_aligned(p.src, p.src_stride * 4, 16) && rows_aligned(p.dst, p.dst_stride * 2, 8)) {
    launch_pdl(convert_kernel<4>, row_grid(p.rows, p.cols / 4, 256), 256, 0, stream, p);
    return launch_status("convert_kernel<4>", shape, stream);
  }
  launch_pdl(convert_kernel<1>, row_grid(p.rows, p.cols, 256), 256, 0, stream, p);
  return launch_status("convert_kernel", shape, stream);
}

}  // namespace kiln::cuda
