// The causal conv1d + silu backward (Training::conv_backward) against central finite differences
// of a double-precision forward written here (y_t = sum_k w[k] x_{t + k - (K - 1)}, zero before
// each row's first token, then silu), itself first checked against cpu::Conv::causal_conv1d.
//
// Tolerances. The forward: |f32 op - double| <= 1e-5 per element. dx (f32, analytical) against
// the double central differences (step 1e-5): |dx - fd| <= 1e-4 |fd| + 1e-6 * max|fd|.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

// x, dout and dx are strided views (rows of `pad` extra channels) as the model's packed buffers.
struct ConvProblem {
  int64_t C = 0, K = 0, T = 0, pad = 3;
  std::vector<int64_t> lens, begins;
  std::vector<double> x, w, dout;  // [T, C], [C, K], [T, C]: f32 values held in double

  int64_t row_of(int64_t t) const {
    int64_t r = 0;
    while (t >= begins[r] + lens[r]) ++r;
    return r;
  }
};

ConvProblem make_problem(int64_t C, int64_t K, std::vector<int64_t> lens, uint32_t seed) {
  ConvProblem p;
  p.C = C, p.K = K, p.lens = lens;
  for (int64_t n : lens) {
    p.begins.push_back(p.T);
    p.T += n;
  }
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  auto fill = [&](std::vector<double>& v, int64_t n, double scale) {
    v.resize(n);
    for (auto& e : v) e = static_cast<float>(scale * normal(rng));
  };
  fill(p.x, p.T * C, 1.0);
  fill(p.w, C * K, 0.6);
  fill(p.dout, p.T * C, 1.0);
  return p;
}

double silu(double y) { return y / (1.0 + std::exp(-y)); }

// The conv + silu output of channel c at token t (of its row), in double.
double conv_out(const ConvProblem& p, int64_t t, int64_t c) {
  const int64_t begin = p.begins[p.row_of(t)];
  double y = 0;
  for (int64_t k = 0; k < p.K; ++k) {
    const int64_t s = t + k - (p.K - 1);
    if (s >= begin) y += p.w[c * p.K + k] * p.x[s * p.C + c];
  }
  return silu(y);
}

// d (sum_t out . dout) / d x[t, c]: only outputs t .. t + K - 1 of channel c in the same row
// depend on it.
double finite_difference(ConvProblem& p, int64_t t, int64_t c) {
  constexpr double kStep = 1e-5;
  const int64_t end = p.begins[p.row_of(t)] + p.lens[p.row_of(t)];
  auto loss = [&] {
    double l = 0;
    for (int64_t s = t; s < std::min(end, t + p.K); ++s) l += conv_out(p, s, c) * p.dout[s * p.C + c];
    return l;
  };
  double& x = p.x[t * p.C + c];
  const double x0 = x;
  x = x0 + kStep;
  const double up = loss();
  x = x0 - kStep;
  const double down = loss();
  x = x0;
  return (up - down) / (2 * kStep);
}

// A [T, C] view with rows of C + pad floats, holding `v` (NaN in the padding and where v is empty).
Tensor padded(const ConvProblem& p, const std::vector<double>& v) {
  Tensor buf = Tensor::empty({p.T, p.C + p.pad}, DType::kF32);
  std::fill_n(buf.data<float>(), buf.numel(), NAN);
  for (int64_t t = 0; t < p.T && !v.empty(); ++t)
    for (int64_t c = 0; c < p.C; ++c) buf.data<float>()[t * (p.C + p.pad) + c] = static_cast<float>(v[t * p.C + c]);
  return buf.as_strided({p.T, p.C}, {p.C + p.pad, 1});
}

struct Bound {
  Tensor x, w, dout, dx;
  BatchLayout layout;
};

Bound bind(Backend& be, const ConvProblem& p) {
  Bound b;
  b.x = padded(p, p.x);
  b.dout = padded(p, p.dout);
  b.dx = padded(p, {});
  b.w = Tensor::empty({p.C, p.K}, DType::kF32);
  for (int64_t i = 0; i < p.C * p.K; ++i) b.w.data<float>()[i] = static_cast<float>(p.w[i]);
  HostBatchLayout h;
  for (size_t r = 0; r < p.lens.size(); ++r) h.add_row(0, p.lens[r], {0, 1, 2, 3}, static_cast<int32_t>(r));
  b.layout = make_batch_layout(h, be.storage()).value();
  return b;
}

float at(const Tensor& t, int64_t row, int64_t c) { return t.data<float>()[row * t.stride(0) + c]; }

void expect_forward_matches_op(Backend& be, const ConvProblem& p, const Bound& b) {
  Tensor state = Tensor::empty({static_cast<int64_t>(p.lens.size()), p.K - 1, p.C}, DType::kF32);  // zeros
  Tensor out = padded(p, {});
  Status s = be.conv().causal_conv1d({b.x, b.w, state, out, &b.layout});
  ASSERT_TRUE(s.ok()) << s.to_string();
  double worst = 0;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t c = 0; c < p.C; ++c) {
      const double d = std::fabs(at(out, t, c) - conv_out(p, t, c));
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
  EXPECT_LE(worst, 1e-5);
}

bool run_backward(Backend& be, Bound& b) {
  ConvBackwardArgs a;
  a.x = b.x;
  a.weight = b.w;
  a.dout = b.dout;
  a.dx = b.dx;
  a.layout = &b.layout;
  Status s = be.training().conv_backward(a);
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok();
}

// Checks dx at the given (token, channel) pairs; the absolute part of the bound scales with the
// largest |fd| among them.
void expect_close(ConvProblem& p, const Bound& b, const std::vector<std::pair<int64_t, int64_t>>& coords) {
  std::vector<double> fd;
  double scale = 0;
  for (auto [t, c] : coords) {
    fd.push_back(finite_difference(p, t, c));
    scale = std::max(scale, std::fabs(fd.back()));
  }
  for (size_t i = 0; i < coords.size(); ++i) {
    const auto [t, c] = coords[i];
    const double g = at(b.dx, t, c);
    EXPECT_TRUE(std::fabs(g - fd[i]) <= 1e-4 * std::fabs(fd[i]) + 1e-6 * scale)
        << "dx[" << t << ", " << c << "]: analytic " << g << " vs finite difference " << fd[i];
  }
  // The padding between rows is not written.
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t c = p.C; c < p.C + p.pad; ++c) EXPECT_TRUE(std::isnan(b.dx.data<float>()[t * b.dx.stride(0) + c]));
}

std::vector<std::pair<int64_t, int64_t>> every_coordinate(const ConvProblem& p) {
  std::vector<std::pair<int64_t, int64_t>> v;
  for (int64_t t = 0; t < p.T; ++t)
    for (int64_t c = 0; c < p.C; ++c) v.push_back({t, c});
  return v;
}

// Rows of 1 and 2 tokens (shorter than the K - 1 = 3 zero taps), 7 and 5; 70 channels (a full
// channel block of 64 and a partial one).
TEST(ConvBackward, MatchesFiniteDifferencesKernel4) {
  auto be = std::move(create_backend("cpu").value());
  ConvProblem p = make_problem(70, 4, {1, 7, 2, 5}, 11);
  Bound b = bind(*be, p);
  expect_forward_matches_op(*be, p, b);
  if (!run_backward(*be, b)) return;
  expect_close(p, b, every_coordinate(p));
}

TEST(ConvBackward, MatchesFiniteDifferencesKernel2) {
  auto be = std::move(create_backend("cpu").value());
  ConvProblem p = make_problem(9, 2, {3, 1, 6}, 12);
  Bound b = bind(*be, p);
  expect_forward_matches_op(*be, p, b);
  if (!run_backward(*be, b)) return;
  expect_close(p, b, every_coordinate(p));
}

// The 4B shape: 2 * 16 * 128 + 32 * 128 = 8192 channels, kernel 4, 200 tokens in two rows;
// sampled coordinates, including each row's first and last tokens.
TEST(ConvBackward, MatchesFiniteDifferencesAt4BShape) {
  auto be = std::move(create_backend("cpu").value());
  ConvProblem p = make_problem(8192, 4, {130, 70}, 13);
  Bound b = bind(*be, p);
  expect_forward_matches_op(*be, p, b);
  if (!run_backward(*be, b)) return;
  std::mt19937 rng(5);
  std::vector<std::pair<int64_t, int64_t>> coords;
  for (int64_t t : {int64_t{0}, int64_t{129}, int64_t{130}, int64_t{199}})
    coords.push_back({t, std::uniform_int_distribution<int64_t>(0, p.C - 1)(rng)});
  for (int i = 0; i < 200; ++i)
    coords.push_back({std::uniform_int_distribution<int64_t>(0, p.T - 1)(rng),
                      std::uniform_int_distribution<int64_t>(0, p.C - 1)(rng)});
  expect_close(p, b, coords);
}

}  // namespace
}  // namespace kiln
