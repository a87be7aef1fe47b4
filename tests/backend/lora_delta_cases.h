// Segment layouts for the LinearFacet::lora_delta tests (CPU in tests/backend/cpu, CUDA in
// tests/backend/cuda): seeded random x, out and factors as host tensors, and the deltas evaluated
// in double precision straight from the definition, out[t] += coef (x[t] A^T) B^T per segment.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/facets.h"
#include "test_util.h"

namespace kiln::testing {

struct LoraSegmentSpec {
  int64_t begin = 0, end = 0, rank = 0;
  DType a = DType::kF32, b = DType::kF32;
  float coef = 1.f;
};

struct LoraDeltaCase {
  std::string name;
  int64_t tokens = 0, in = 0, out = 0;
  std::vector<LoraSegmentSpec> segments;
  int64_t x_pad = 0, out_pad = 0;  // extra floats at the end of each row: strided x / out views
};

// Host tensors of one case: x and out are [tokens, in] / [tokens, out] views of wider bases.
struct LoraDeltaInputs {
  Tensor x_base, x, out_base, out;
  std::vector<Tensor> a, b;
  std::vector<LoraSegment> segments;  // over a and b
};

inline LoraDeltaInputs make_lora_inputs(const LoraDeltaCase& c, uint32_t seed) {
  LoraDeltaInputs in;
  in.x_base = random_tensor({c.tokens, c.in + c.x_pad}, seed++);
  in.x = in.x_base.as_strided({c.tokens, c.in}, {c.in + c.x_pad, 1});
  in.out_base = random_tensor({c.tokens, c.out + c.out_pad}, seed++);
  in.out = in.out_base.as_strided({c.tokens, c.out}, {c.out + c.out_pad, 1});
  for (const LoraSegmentSpec& s : c.segments) {
    // A at PEFT's init scale keeps x A^T of order 1 whatever the width.
    in.a.push_back(random_tensor({s.rank, c.in}, seed++, 1.f / std::sqrt(static_cast<float>(c.in)), s.a));
    in.b.push_back(random_tensor({c.out, s.rank}, seed++, 1.f, s.b));
  }
  for (size_t i = 0; i < c.segments.size(); ++i)
    in.segments.push_back({c.segments[i].begin, c.segments[i].end, in.a[i], in.b[i], c.segments[i].coef});
  return in;
}

// out_base (every element, padding included) after the deltas, in double.
inline std::vector<double> lora_reference(const LoraDeltaInputs& in, const LoraDeltaCase& c) {
  std::vector<double> y(static_cast<size_t>(in.out_base.numel()));
  for (size_t i = 0; i < y.size(); ++i) y[i] = in.out_base.data<float>()[i];
  const int64_t xs = c.in + c.x_pad, ys = c.out + c.out_pad;
  for (size_t s = 0; s < c.segments.size(); ++s) {
    const LoraSegmentSpec& g = c.segments[s];
    std::vector<double> u(static_cast<size_t>(g.rank));
    for (int64_t t = g.begin; t < g.end; ++t) {
      for (int64_t j = 0; j < g.rank; ++j) {
        double d = 0;
        for (int64_t k = 0; k < c.in; ++k) d += double(in.x_base.data<float>()[t * xs + k]) * value_at(in.a[s], j * c.in + k);
        u[j] = g.coef * d;
      }
      for (int64_t o = 0; o < c.out; ++o) {
        double d = 0;
        for (int64_t j = 0; j < g.rank; ++j) d += u[j] * value_at(in.b[s], o * g.rank + j);
        y[t * ys + o] += d;
      }
    }
  }
  return y;
}

// A linear facet with matmul alone (another backend's), so lora_delta runs the facet's default
// implementation through matmul, as it would on a backend without a lora_delta of its own.
class MatmulOnlyLinear final : public LinearFacet {
 public:
  explicit MatmulOnlyLinear(LinearFacet& inner) : inner_(inner) {}
  Support supports(const MatmulRequest& r) const override { return inner_.supports(r); }
  Status matmul(const MatmulArgs& a) override { return inner_.matmul(a); }

 private:
  LinearFacet& inner_;
};

// A copy of a contiguous host tensor (out before the call).
inline Tensor host_copy(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::memcpy(c.raw(), t.raw(), t.nbytes());
  return c;
}

// max |got - want| over out_base / max |want - out before| (the size of the deltas): an error
// relative to what the call adds, not to the accumulator it adds to.
inline double lora_error(const Tensor& got_base, const std::vector<double>& want, const Tensor& before_base) {
  double err = 0, scale = 0;
  for (int64_t i = 0; i < before_base.numel(); ++i) {
    const double d = std::fabs(double(got_base.data<float>()[i]) - want[i]);
    if (std::isnan(d)) return INFINITY;
    err = std::max(err, d);
    scale = std::max(scale, std::fabs(want[i] - before_base.data<float>()[i]));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace kiln::testing
