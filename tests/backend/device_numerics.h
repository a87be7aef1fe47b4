// Oracles for device backends whose numerics differ from the CPU reference's by a stated
// rounding: the CPU backend with each GEMM's x rounded (to the weight dtype, as CUDA's cuBLASLt
// GEMMs on 16-bit weights round it, or to a fixed dtype, as Vulkan's cooperative matrices round it
// to f16) and new K/V rows rounded to the cache dtype a device keeps.
#pragma once

#include <memory>
#include <optional>

#include "backend/device_test_util.h"
#include "backend/registry.h"
#include "forwarding_backend.h"

namespace kiln::testing {

// x rounded before each matmul on 16-bit weights with at least `min_rows` rows (f32 accumulation
// either way): to `to`, or where unset to the weight's dtype.
class RoundedGemmInputs final : public LinearFacet {
 public:
  RoundedGemmInputs(LinearFacet& inner, std::optional<DType> to, int64_t min_rows)
      : inner_(inner), to_(to), min_rows_(min_rows) {}
  Support supports(const MatmulRequest& r) const override { return inner_.supports(r); }
  Status matmul(const MatmulArgs& a) override {
    if (a.w.dtype() == DType::kF32 || a.x.dim(0) < min_rows_) return inner_.matmul(a);
    const DType to = to_.value_or(a.w.dtype());
    Tensor x = Tensor::empty(a.x.shape(), DType::kF32);
    for (int64_t i = 0; i < a.x.dim(0); ++i)
      for (int64_t j = 0; j < a.x.dim(1); ++j)
        x.data<float>()[i * a.x.dim(1) + j] = rounded_to(to, a.x.data<float>()[i * a.x.stride(0) + j]);
    MatmulArgs b = a;
    b.x = x;
    return inner_.matmul(b);
  }

 private:
  LinearFacet& inner_;
  std::optional<DType> to_;
  int64_t min_rows_;
};

// The CPU attention over a K/V cache holding values of dtype kv: new K/V rows rounded to kv as
// they are written.
class RoundedKvCache final : public AttentionFacet {
 public:
  RoundedKvCache(AttentionFacet& inner, DType kv) : inner_(inner), kv_(kv) {}
  Support supports(const RopeRequest& r) const override { return inner_.supports(r); }
  Support supports(const KvWriteRequest& r) const override { return inner_.supports(r); }
  Support supports(const AttentionRequest& r) const override { return inner_.supports(r); }
  Status rope(const RopeArgs& a) override { return inner_.rope(a); }
  Status attend(const AttentionArgs& a) override { return inner_.attend(a); }
  Status write_kv(const KvWriteArgs& a) override {
    if (kv_ == DType::kF32) return inner_.write_kv(a);
    KvWriteArgs b = a;
    b.k = rounded(a.k);
    b.v = rounded(a.v);
    return inner_.write_kv(b);
  }

 private:
  Tensor rounded(const Tensor& t) const {  // [tokens, heads, dim], any strides -> contiguous
    Tensor r = Tensor::empty(t.shape(), DType::kF32);
    float* out = r.data<float>();
    for (int64_t i = 0; i < t.dim(0); ++i)
      for (int64_t h = 0; h < t.dim(1); ++h)
        for (int64_t e = 0; e < t.dim(2); ++e)
          *out++ = rounded_to(kv_, t.data<float>()[i * t.stride(0) + h * t.stride(1) + e * t.stride(2)]);
    return r;
  }
  AttentionFacet& inner_;
  DType kv_;
};

// The CPU backend with a device's GEMM input rounding and K/V cache dtype.
class CpuWithDeviceNumerics final : public ForwardingBackend {
 public:
  struct Options {
    bool round_gemm_inputs = true;
    std::optional<DType> gemm_dtype;  // unset: the weight's dtype
    int64_t gemm_min_rows = 1;        // matmuls with fewer rows of x keep f32 x
    DType kv = DType::kF32;
  };
  explicit CpuWithDeviceNumerics(const Options& o)
      : ForwardingBackend(std::move(create_backend("cpu").value())),
        linear_(inner().linear(), o.gemm_dtype, o.gemm_min_rows),
        attention_(inner().attention(), o.kv),
        round_gemm_inputs_(o.round_gemm_inputs) {}
  LinearFacet& linear() override { return round_gemm_inputs_ ? linear_ : inner().linear(); }
  AttentionFacet& attention() override { return attention_; }

 private:
  RoundedGemmInputs linear_;
  RoundedKvCache attention_;
  bool round_gemm_inputs_;
};

}  // namespace kiln::testing
