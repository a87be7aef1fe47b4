// Strided views of device tensors as kernel parameters take them: a pointer and the element
// strides of the leading dimensions (the last dimension is contiguous). Launchers build them from
// tensors with rows_of / heads_of (backend/cuda/views.h), one call a tensor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace kiln::cuda {

// [rows, cols]: row r starts stride elements after row r - 1.
template <typename T>
struct Rows {
  T* ptr = nullptr;
  int64_t stride = 0;
  __host__ __device__ T* row(int64_t r) const { return ptr + r * stride; }
};

// [tokens, heads, dim]: the vector of (token t, head h).
template <typename T>
struct Heads {
  T* ptr = nullptr;
  int64_t token_stride = 0, head_stride = 0;
  __host__ __device__ T* at(int64_t t, int64_t h) const { return ptr + t * token_stride + h * head_stride; }
};

}  // namespace kiln::cuda
