// Kernel views (kernels/strided.h) of a tensor: its data pointer as T and its leading strides.
// An undefined tensor (an optional operand left out) gives a null view.
#pragma once

#include <type_traits>

#include "backend/cuda/kernels/strided.h"
#include "core/tensor.h"

namespace kiln::cuda {

template <typename T>
T* data_of(const Tensor& t) {
  if (!t.defined()) return nullptr;
  if constexpr (std::is_void_v<std::remove_const_t<T>>) return t.raw();
  else return t.data<std::remove_const_t<T>>();
}

template <typename T>
Rows<T> rows_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {data_of<T>(t), t.stride(0)};
}

template <typename T>
Heads<T> heads_of(const Tensor& t) {
  if (!t.defined()) return {};
  return {data_of<T>(t), t.stride(0), t.stride(1)};
}

}  // namespace kiln::cuda
