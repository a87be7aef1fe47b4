// The chunked gated delta rule equals the recurrent one (to f32 rounding) over random inputs
// whose lengths straddle chunk boundaries, from zero and non-zero states, for several chunk
// sizes; and the recurrent form equals a double-precision evaluation of the spec's recurrence.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::max_abs_diff;
using testing::random_tensor;

constexpr int64_t kHk = 2, kHv = 4, kDk = 16, kDv = 8;

struct GdnInputs {
  Tensor qkv, a, b, a_log, dt_bias;  // qkv packs q | k | v per token like the model's conv output
  int64_t n;
};

GdnInputs make_inputs(int64_t n, uint32_t seed) {
  GdnInputs in;
  in.n = n;
  in.qkv = random_tensor({n, 2 * kHk * kDk + kHv * kDv}, seed);
  in.a = random_tensor({n, kHv}, seed + 1);
  in.b = random_tensor({n, kHv}, seed + 2);
  in.a_log = Tensor::from_values(std::vector<float>{0.1f, 1.2f, 2.0f, 0.7f}, {kHv});
  in.dt_bias = Tensor::from_values(std::vector<float>{-3.f, -1.f, -4.f, 0.5f}, {kHv});
  return in;
}

// Runs rows (each a length; all rows read the same inputs) from `state` (modified in place).
Tensor run(Backend& be, const GdnInputs& in, const std::vector<int64_t>& lens, GdnForm form, int chunk, Tensor& state) {
  HostBatchLayout h;
  int64_t total = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    h.add_row(0, lens[r], {0, 1, 2, 3}, static_cast<int32_t>(r));
    total += lens[r];
  }
  auto bl = make_batch_layout(h, be.storage()).value();
  // Row r reads tokens [0, lens[r]) of the inputs: build a concatenated copy.
  const int64_t C = in.qkv.dim(1);
  Tensor qkv = Tensor::empty({total, C}, DType::kF32), a = Tensor::empty({total, kHv}, DType::kF32),
         b = Tensor::empty({total, kHv}, DType::kF32);
  int64_t t = 0;
  for (int64_t len : lens)
    for (int64_t i = 0; i < len; ++i, ++t) {
      std::copy_n(in.qkv.data<float>() + i * C, C, qkv.data<float>() + t * C);
      std::copy_n(in.a.data<float>() + i * kHv, kHv, a.data<float>() + t * kHv);
      std::copy_n(in.b.data<float>() + i * kHv, kHv, b.data<float>() + t * kHv);
    }
  GdnArgs g;
  g.form = form;
  g.chunk = chunk;
  g.q = qkv.as_strided({total, kHk, kDk}, {C, kDk, 1});
  g.k = qkv.as_strided({total, kHk, kDk}, {C, kDk, 1}, kHk * kDk);
  g.v = qkv.as_strided({total, kHv, kDv}, {C, kDv, 1}, 2 * kHk * kDk);
  g.a = a;
  g.b = b;
  g.a_log = in.a_log;
  g.dt_bias = in.dt_bias;
  g.state = state;
  g.out = Tensor::empty({total, kHv, kDv}, DType::kF32);
  g.layout = &bl;
  Status s = be.gdn().delta_rule(g);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return g.out;
}

Tensor copy_of(const Tensor& t) {
  Tensor c = Tensor::empty(t.shape(), t.dtype());
  std::copy_n(t.data<float>(), t.numel(), c.data<float>());
  return c;
}

TEST(Gdn, ChunkedEqualsRecurrentAcrossChunkBoundaries) {
  auto be = std::move(create_backend("cpu").value());
  for (int64_t n : {1, 15, 16, 17, 63, 64, 65, 127, 128, 129, 200}) {
    GdnInputs in = make_inputs(n, 100 + static_cast<uint32_t>(n));
    Tensor init = random_tensor({1, kHv, kDk, kDv}, 7, 0.5f);
    Tensor s_rec = copy_of(init);
    Tensor ref = run(*be, in, {n}, GdnForm::kRecurrent, 64, s_rec);
    for (int chunk : {16, 64, 128}) {
      Tensor s_chunk = copy_of(init);
      Tensor out = run(*be, in, {n}, GdnForm::kChunked, chunk, s_chunk);
      EXPECT_LE(max_abs_diff(out.data<float>(), ref.data<float>(), out.numel()), 1e-5) << "n=" << n << " chunk=" << chunk;
      EXPECT_LE(max_abs_diff(s_chunk.data<float>(), s_rec.data<float>(), s_rec.numel()), 1e-5)
          << "state n=" << n << " chunk=" << chunk;
    }
  }
}

TEST(Gdn, BatchedRowsAreIndependent) {
  auto be = std::move(create_backend("cpu").value());
  GdnInputs in = make_inputs(70, 9);
  Tensor s_batch = Tensor::empty({3, kHv, kDk, kDv}, DType::kF32);
  Tensor out = run(*be, in, {70, 5, 33}, GdnForm::kChunked, 16, s_batch);
  int64_t off = 0;
  for (int64_t len : {70, 5, 33}) {
    Tensor s1 = Tensor::empty({1, kHv, kDk, kDv}, DType::kF32);
    Tensor one = run(*be, in, {len}, GdnForm::kRecurrent, 64, s1);
    EXPECT_LE(max_abs_diff(out.data<float>() + off * kHv * kDv, one.data<float>(), one.numel()), 1e-5) << len;
    off += len;
  }
}

// The recurrence of docs/model.md ("The gated delta rule"), in double, for one head.
TEST(Gdn, RecurrentMatchesSpecInDouble) {
  auto be = std::move(create_backend("cpu").value());
  const int64_t n = 40, C = 2 * kHk * kDk + kHv * kDv;
  GdnInputs in = make_inputs(n, 55);
  Tensor state = Tensor::empty({1, kHv, kDk, kDv}, DType::kF32);
  Tensor out = run(*be, in, {n}, GdnForm::kRecurrent, 64, state);
  const int64_t h = 3, kh = h / (kHv / kHk);
  std::vector<double> S(kDk * kDv, 0.0);
  for (int64_t t = 0; t < n; ++t) {
    const float* row = in.qkv.data<float>() + t * C;
    std::vector<double> q(kDk), k(kDk), v(kDv);
    double qs = 0, ks = 0;
    for (int64_t e = 0; e < kDk; ++e) {
      q[e] = row[kh * kDk + e];
      k[e] = row[kHk * kDk + kh * kDk + e];
      qs += q[e] * q[e];
      ks += k[e] * k[e];
    }
    for (int64_t e = 0; e < kDk; ++e) {
      q[e] /= std::sqrt(qs + 1e-6) * std::sqrt(double(kDk));
      k[e] /= std::sqrt(ks + 1e-6);
    }
    for (int64_t j = 0; j < kDv; ++j) v[j] = row[2 * kHk * kDk + h * kDv + j];
    const double av = in.a.data<float>()[t * kHv + h] + in.dt_bias.data<float>()[h];
    const double g = -std::exp(double(in.a_log.data<float>()[h])) * std::log1p(std::exp(av));
    const double beta = 1 / (1 + std::exp(-double(in.b.data<float>()[t * kHv + h])));
    for (auto& s : S) s *= std::exp(g);
    std::vector<double> u(kDv);
    for (int64_t j = 0; j < kDv; ++j) {
      double sk = 0;
      for (int64_t e = 0; e < kDk; ++e) sk += S[e * kDv + j] * k[e];
      u[j] = beta * (v[j] - sk);
    }
    for (int64_t e = 0; e < kDk; ++e)
      for (int64_t j = 0; j < kDv; ++j) S[e * kDv + j] += k[e] * u[j];
    for (int64_t j = 0; j < kDv; ++j) {
      double o = 0;
      for (int64_t e = 0; e < kDk; ++e) o += S[e * kDv + j] * q[e];
      EXPECT_NEAR(out.data<float>()[(t * kHv + h) * kDv + j], o, 1e-5) << "t=" << t << " j=" << j;
    }
  }
}

}  // namespace
}  // namespace kiln
