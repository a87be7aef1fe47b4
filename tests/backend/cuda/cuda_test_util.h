// What the CUDA tests share: the backend or a skip, host <-> device mirrors of (strided) views,
// and the normalised error measure max|got - want| / max|want|.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln::testing {

// Binds `var` to the CUDA backend, or skips the test saying why (CI has no GPU).
#define KILN_CUDA_OR_SKIP(var)                                                                  \
  auto var##_result = ::kiln::create_backend("cuda");                                           \
  if (!var##_result.ok())                                                                       \
    GTEST_SKIP() << "SKIPPED: no CUDA device (" << var##_result.status().to_string() << ")"; \
  std::unique_ptr<::kiln::Backend> var = std::move(var##_result).value()

// A view of `base` with the shape, strides and offset that `view` has over `view_base`.
inline Tensor same_view(const Tensor& base, const Tensor& view, const Tensor& view_base) {
  std::array<int64_t, kMaxRank> strides{};
  for (int i = 0; i < view.rank(); ++i) strides[i] = view.stride(i);
  const int64_t offset =
      static_cast<int64_t>(view.offset_bytes() - view_base.offset_bytes()) / static_cast<int64_t>(dtype_size(view.dtype()));
  return base.as_strided(view.shape(), strides, offset);
}

// A device copy of a contiguous host tensor.
inline Tensor to_device(Backend& be, const Tensor& host) {
  auto r = be.storage().upload(host);
  EXPECT_TRUE(r.ok()) << r.status().to_string();
  return r.ok() ? r.value() : Tensor();
}

// A host copy of a contiguous device tensor.
inline Tensor to_host(Backend& be, const Tensor& dev) {
  Tensor h = Tensor::empty(dev.shape(), dev.dtype());
  Status s = be.storage().copy_to_host(dev, h);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return h;
}

// max |got - want| / max |want| over two contiguous f32 tensors (inf on NaN or shape mismatch).
inline double rel_error(const Tensor& got, const Tensor& want) {
  if (!(got.shape() == want.shape())) return INFINITY;
  double scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
  return max_abs_diff(got.data<float>(), want.data<float>(), want.numel()) / std::max(scale, 1e-30);
}

// Rounds every element of a contiguous f32 host tensor to bf16 (kept as f32) in place, the
// storage being shared, and returns it.
inline Tensor rounded_to_bf16(Tensor t) {
  float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return t;
}

// A bf16 copy of a contiguous f32 host tensor (round to nearest even).
inline Tensor to_bf16(const Tensor& f32) {
  Tensor t = Tensor::empty(f32.shape(), DType::kBF16);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<uint16_t>()[i] = f32_to_bf16(f32.data<float>()[i]);
  return t;
}

// The f32 widening of a contiguous bf16 host tensor (exact).
inline Tensor widened(const Tensor& bf16) {
  Tensor t = Tensor::empty(bf16.shape(), DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = bf16_to_f32(bf16.data<uint16_t>()[i]);
  return t;
}

// A host tensor of i32 values.
inline Tensor host_i32(const std::vector<int32_t>& v) {
  return Tensor::from_values(v, {static_cast<int64_t>(v.size())});
}

}  // namespace kiln::testing
