// What the device backends' tests share: host <-> device mirrors of (strided) views, the
// normalised error measure max|got - want| / max|want|, and dtype conversions of host tensors.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "test_util.h"

namespace kiln::testing {

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

// The same over two vectors (inf on a length mismatch).
inline double rel_error(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double scale = 0;
  for (float w : want) scale = std::max(scale, std::fabs(double(w)));
  return max_abs_diff(got.data(), want.data(), static_cast<int64_t>(want.size())) / std::max(scale, 1e-30);
}

// Rounds every element of a contiguous f32 host tensor to float dtype d (kept as f32) in place,
// the storage being shared, and returns it.
inline Tensor round_to(Tensor t, DType d) {
  float* x = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) x[i] = rounded_to(d, x[i]);
  return t;
}

// A copy of a contiguous f32 host tensor in dtype d: bf16 or f8e4m3 (round to nearest even; e4m3
// saturating, as the device's conversion).
inline Tensor converted(const Tensor& f32, DType d) {
  Tensor t = Tensor::empty(f32.shape(), d);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float x = f32.data<float>()[i];
    if (d == DType::kBF16) t.data<uint16_t>()[i] = f32_to_bf16(x);
    else t.data<uint8_t>()[i] = f32_to_e4m3(x);
  }
  return t;
}

// The f32 widening of a contiguous host tensor of any float dtype (exact).
inline Tensor widened(const Tensor& t) {
  Tensor w = Tensor::empty(t.shape(), DType::kF32);
  to_f32(t.dtype(), t.raw(), w.data<float>(), static_cast<size_t>(t.numel()));
  return w;
}

// A host tensor of i32 values.
inline Tensor host_i32(const std::vector<int32_t>& v) {
  return Tensor::from_values(v, {static_cast<int64_t>(v.size())});
}

// A host buffer and its device twin, viewed alike: a case's inputs as views of one buffer (q, k
// and v of one projection), on the host for the reference and on the device for the backend.
struct DevicePair {
  Tensor host_base, dev_base, host, dev;
  DevicePair() = default;
  DevicePair(Backend& be, Tensor base) : host_base(base), dev_base(to_device(be, base)), host(base), dev(dev_base) {}
  DevicePair view(const Tensor& host_view) const {
    DevicePair p = *this;
    p.host = host_view;
    p.dev = same_view(dev_base, host_view, host_base);
    return p;
  }
  Tensor dev_result(Backend& be) const { return to_host(be, dev_base); }
  // The device's whole buffer against the host's (views' padding included).
  double error(Backend& be) const { return rel_error(dev_result(be), host_base); }
};

}  // namespace kiln::testing
