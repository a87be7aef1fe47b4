#include <cuda_bf16.h>
#include <cuda_fp16.h>

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
  float* o = p.out + t * p.out_stride;
  const bool valid = id >= 0 && id < p.vocab;
  for (int64_t j = threadIdx.x; j < p.width; j += blockDim.x)
    o[j] = valid ? load_float(p.table, id * p.table_stride + j, p.table_dtype) : __int_as_float(0x7fc00000);
}

// Grid: (column blocks, rows).
__global__ void binary_kernel(BinaryParams p) {
  pdl_begin();
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* a = p.a + r * p.a_stride;
    const float* b = p.b + r * p.b_stride;
    float* o = p.out + r * p.out_stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < p.width;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      const float x = a[j], y = b[j];
      o[j] = p.op == BinaryOp::kAdd ? x + y : x / (1.f + expf(-x)) * y;
    }
  }
}

__global__ void convert_kernel(ConvertParams p) {
  pdl_begin();
  for (int64_t r = blockIdx.y; r < p.rows; r += gridDim.y) {
    const float* s = p.src + r * p.src_stride;
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < p.cols;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
      if (p.dst_dtype == DType::kBF16)
        static_cast<__nv_bfloat16*>(p.dst)[r * p.dst_stride + j] = __float2bfloat16_rn(s[j]);
      else
        static_cast<__half*>(p.dst)[r * p.dst_stride + j] = __float2half_rn(s[j]);
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
  auto shape = [&] { return std::string(p.op == BinaryOp::kAdd ? "add " : "silu_mul ") + rows_shape(p.rows, p.width); };
  if (p.rows == 0 || p.width == 0) return {};
  launch_pdl(binary_kernel, row_grid(p.rows, p.width, 256), 256, 0, stream, p);
  return launch_status("binary_kernel", shape, stream);
}

Status convert_f32(const ConvertParams& p, cudaStream_t stream) {
  auto shape = [&] { return rows_shape(p.rows, p.cols) + " to " + std::string(dtype_name(p.dst_dtype)); };
  if (p.rows == 0 || p.cols == 0) return {};
  launch_pdl(convert_kernel, row_grid(p.rows, p.cols, 256), 256, 0, stream, p);
  return launch_status("convert_kernel", shape, stream);
}

}  // namespace kiln::cuda
