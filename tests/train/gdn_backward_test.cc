// The gated delta rule's backward (Training::gdn_backward) against central finite differences of
// a double-precision forward written here from docs/model.md (l2 norms with eps 1e-6, q
// scaled by 1/sqrt(dk), g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b), value head h
// reading key head h / (Hv / Hk), the recurrence from a zero state per row). That forward is
// first checked against cpu::Gdn::delta_rule, so the differences are those of the real op.
//
// Tolerances. The forward: |f32 op - double| <= 2e-5 per element (outputs are O(1)). The
// gradients (f32, analytical) against the double central differences (step 1e-5, whose own
// error is far below 1e-8): per element |grad - fd| <= 1e-4 |fd| + 1e-5 * scale, where scale is
// the largest |fd| of that tensor (small shapes, every coordinate) or the largest |grad| of that
// tensor (the 4B shape, sampled coordinates). Different chunk sizes give gradients within 1e-6
// of each other (the states inside a chunk are recomputed by the same recurrence, so in fact
// equal).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

// One problem laid out as the model passes it (src/model/qwen35.cc, gdn_layer): q | k | v packed
// per token in one [T, 2 Hk dk + Hv dv] buffer; here a | b packed in one [T, 2 Hv] buffer too, so
// every activation is a strided view. Values are f32 numbers held in double.
struct Problem {
  int64_t Hk = 0, Hv = 0, dk = 0, dv = 0, T = 0, C = 0;
  std::vector<int64_t> lens, begins;
  std::vector<double> qkv, ab, a_log, dt_bias, dout;  // [T, C], [T, 2 Hv], [Hv], [Hv], [T, Hv, dv]

  int64_t q_at(int64_t t, int64_t kh, int64_t e) const { return t * C + kh * dk + e; }
  int64_t k_at(int64_t t, int64_t kh, int64_t e) const { return t * C + Hk * dk + kh * dk + e; }
  int64_t v_at(int64_t t, int64_t h, int64_t j) const { return t * C + 2 * Hk * dk + h * dv + j; }
  int64_t a_at(int64_t t, int64_t h) const { return t * 2 * Hv + h; }
  int64_t b_at(int64_t t, int64_t h) const { return t * 2 * Hv + Hv + h; }
  int64_t row_of(int64_t t) const {
    int64_t r = 0;
    while (t >= begins[r] + lens[r]) ++r;
    return r;
  }
};

double as_f32(double x) { return static_cast<double>(static_cast<float>(x)); }

Problem make_problem(int64_t Hk, int64_t Hv, int64_t dk, int64_t dv, std::vector<int64_t> lens, uint32_t seed) {
  Problem p;
  p.Hk = Hk, p.Hv = Hv, p.dk = dk, p.dv = dv, p.lens = lens;
  for (int64_t n : lens) {
    p.begins.push_back(p.T);
    p.T += n;
  }
  p.C = 2 * Hk * dk + Hv * dv;
  std::mt19937 rng(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::uniform_real_distribution<double> uni(0.0, 1.0);
  auto fill = [&](std::vector<double>& v, int64_t n, double scale) {
    v.resize(n);
    for (auto& x : v) x = as_f32(scale * normal(rng));
  };
  fill(p.qkv, p.T * p.C, 1.0);
  fill(p.ab, p.T * 2 * Hv, 1.0);
  fill(p.dout, p.T * Hv * dv, 1.0);
  // Decays from mild to strong: g = -exp(a_log) softplus(a + dt_bias) spans about -0.05 .. -3.
  p.a_log.resize(Hv);
  p.dt_bias.resize(Hv);
  for (int64_t h = 0; h < Hv; ++h) {
    p.a_log[h] = as_f32(-1.0 + 1.5 * uni(rng));
    p.dt_bias[h] = as_f32(-2.0 + 2.0 * uni(rng));
  }
  return p;
}

// The spec's forward for value head h over row `row`, in double. Returns sum_t o_t . dout_t (the
// loss whose gradient the backward computes, restricted to this head and row); writes o_t into
// `out` ([T, Hv, dv]) when given.
double head_loss(const Problem& p, int64_t row, int64_t h, std::vector<double>* out = nullptr) {
  const int64_t dk = p.dk, dv = p.dv, kh = h / (p.Hv / p.Hk);
  std::vector<double> S(dk * dv, 0.0), q(dk), k(dk), u(dv);
  double loss = 0.0;
  for (int64_t t = p.begins[row]; t < p.begins[row] + p.lens[row]; ++t) {
    double qq = 0, kk = 0;
    for (int64_t e = 0; e < dk; ++e) {
      q[e] = p.qkv[p.q_at(t, kh, e)];
      k[e] = p.qkv[p.k_at(t, kh, e)];
      qq += q[e] * q[e];
      kk += k[e] * k[e];
    }
    for (int64_t e = 0; e < dk; ++e) {
      q[e] = q[e] / std::sqrt(qq + 1e-6) / std::sqrt(static_cast<double>(dk));
      k[e] = k[e] / std::sqrt(kk + 1e-6);
    }
    const double x = p.ab[p.a_at(t, h)] + p.dt_bias[h];
    const double g = -std::exp(p.a_log[h]) * std::log1p(std::exp(x));
    const double beta = 1.0 / (1.0 + std::exp(-p.ab[p.b_at(t, h)]));
    for (auto& s : S) s *= std::exp(g);
    for (int64_t j = 0; j < dv; ++j) {
      double sk = 0;
      for (int64_t e = 0; e < dk; ++e) sk += S[e * dv + j] * k[e];
      u[j] = beta * (p.qkv[p.v_at(t, h, j)] - sk);
    }
    for (int64_t e = 0; e < dk; ++e)
      for (int64_t j = 0; j < dv; ++j) S[e * dv + j] += k[e] * u[j];
    for (int64_t j = 0; j < dv; ++j) {
      double o = 0;
      for (int64_t e = 0; e < dk; ++e) o += S[e * dv + j] * q[e];
      if (out) (*out)[(t * p.Hv + h) * dv + j] = o;
      loss += o * p.dout[(t * p.Hv + h) * dv + j];
    }
  }
  return loss;
}

Tensor to_tensor(const std::vector<double>& v, Shape shape) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

Tensor filled(Shape shape, float value) {
  Tensor t = Tensor::empty(shape, DType::kF32);
  std::fill_n(t.data<float>(), t.numel(), value);
  return t;
}

BatchLayout layout_of(Backend& be, const Problem& p) {
  HostBatchLayout h;
  for (size_t r = 0; r < p.lens.size(); ++r) h.add_row(0, p.lens[r], {0, 1, 2, 3}, static_cast<int32_t>(r));
  return make_batch_layout(h, be.storage()).value();
}

// The problem's tensors: inputs, and gradient buffers packed as the inputs (NaN until written).
struct Bound {
  Tensor qkv, ab, a_log, dt_bias, dout, dqkv, dab;
  BatchLayout layout;
};

Bound bind(Backend& be, const Problem& p) {
  Bound b;
  b.qkv = to_tensor(p.qkv, {p.T, p.C});
  b.ab = to_tensor(p.ab, {p.T, 2 * p.Hv});
  b.a_log = to_tensor(p.a_log, {p.Hv});
  b.dt_bias = to_tensor(p.dt_bias, {p.Hv});
  b.dout = to_tensor(p.dout, {p.T, p.Hv, p.dv});
  b.dqkv = filled({p.T, p.C}, NAN);
  b.dab = filled({p.T, 2 * p.Hv}, NAN);
  b.layout = layout_of(be, p);
  return b;
}

Tensor q_view(const Problem& p, const Tensor& t) { return t.as_strided({p.T, p.Hk, p.dk}, {p.C, p.dk, 1}); }
Tensor k_view(const Problem& p, const Tensor& t) {
  return t.as_strided({p.T, p.Hk, p.dk}, {p.C, p.dk, 1}, p.Hk * p.dk);
}
Tensor v_view(const Problem& p, const Tensor& t) {
  return t.as_strided({p.T, p.Hv, p.dv}, {p.C, p.dv, 1}, 2 * p.Hk * p.dk);
}
Tensor a_view(const Problem& p, const Tensor& t) { return t.as_strided({p.T, p.Hv}, {2 * p.Hv, 1}); }
Tensor b_view(const Problem& p, const Tensor& t) { return t.as_strided({p.T, p.Hv}, {2 * p.Hv, 1}, p.Hv); }

GdnBackwardArgs backward_args(const Problem& p, const Bound& b, int chunk) {
  GdnBackwardArgs g;
  g.chunk = chunk;
  g.q = q_view(p, b.qkv);
  g.k = k_view(p, b.qkv);
  g.v = v_view(p, b.qkv);
  g.a = a_view(p, b.ab);
  g.b = b_view(p, b.ab);
  g.a_log = b.a_log;
  g.dt_bias = b.dt_bias;
  g.dout = b.dout;
  g.dq = q_view(p, b.dqkv);
  g.dk = k_view(p, b.dqkv);
  g.dv = v_view(p, b.dqkv);
  g.da = a_view(p, b.dab);
  g.db = b_view(p, b.dab);
  g.layout = &b.layout;
  return g;
}

// Runs the backward; returns false (with a failure recorded) when the call fails.
bool run_backward(Backend& be, const Problem& p, Bound& b, int chunk) {
  Status s = be.training().gdn_backward(backward_args(p, b, chunk));
  EXPECT_TRUE(s.ok()) << s.to_string();
  return s.ok();
}

// Which coordinate of which input: the buffer (qkv or ab) and flat index, its tensor's name, and
// the value heads whose output it touches.
struct Coord {
  bool in_qkv = true;
  int64_t index = 0;
  const char* name = "";
  int64_t row = 0, h0 = 0, h1 = 0;  // value heads [h0, h1)
};

Coord coord_of(const Problem& p, bool in_qkv, int64_t index) {
  Coord c;
  c.in_qkv = in_qkv;
  c.index = index;
  const int64_t ratio = p.Hv / p.Hk;
  if (in_qkv) {
    const int64_t t = index / p.C, ch = index % p.C;
    c.row = p.row_of(t);
    if (ch < 2 * p.Hk * p.dk) {
      const int64_t kh = (ch % (p.Hk * p.dk)) / p.dk;
      c.name = ch < p.Hk * p.dk ? "dq" : "dk";
      c.h0 = kh * ratio, c.h1 = (kh + 1) * ratio;
    } else {
      c.name = "dv";
      c.h0 = (ch - 2 * p.Hk * p.dk) / p.dv, c.h1 = c.h0 + 1;
    }
  } else {
    const int64_t t = index / (2 * p.Hv), ch = index % (2 * p.Hv);
    c.row = p.row_of(t);
    c.name = ch < p.Hv ? "da" : "db";
    c.h0 = ch % p.Hv, c.h1 = c.h0 + 1;
  }
  return c;
}

// d loss / d input at one coordinate by central differences of the double forward (only the
// heads and row the coordinate reaches: the others cancel).
double finite_difference(Problem& p, const Coord& c) {
  constexpr double kStep = 1e-5;
  double& x = c.in_qkv ? p.qkv[c.index] : p.ab[c.index];
  const double x0 = x;
  auto loss = [&] {
    double l = 0;
    for (int64_t h = c.h0; h < c.h1; ++h) l += head_loss(p, c.row, h);
    return l;
  };
  x = x0 + kStep;
  const double up = loss();
  x = x0 - kStep;
  const double down = loss();
  x = x0;
  return (up - down) / (2 * kStep);
}

float grad_at(const Bound& b, const Coord& c) {
  return c.in_qkv ? b.dqkv.data<float>()[c.index] : b.dab.data<float>()[c.index];
}

// Every coordinate's finite difference, for the small problems.
struct FdTable {
  std::vector<Coord> coords;
  std::vector<double> fd;
};

FdTable all_differences(Problem& p) {
  FdTable f;
  for (int64_t i = 0; i < p.T * p.C; ++i) f.coords.push_back(coord_of(p, true, i));
  for (int64_t i = 0; i < p.T * 2 * p.Hv; ++i) f.coords.push_back(coord_of(p, false, i));
  for (const Coord& c : f.coords) f.fd.push_back(finite_difference(p, c));
  return f;
}

constexpr double kRtol = 1e-4, kAtolFrac = 1e-5;

// Checks |grad - fd| <= kRtol |fd| + kAtolFrac * scale[name] at every listed coordinate, and
// records the worst error / bound per tensor as a test property.
void expect_close(const Bound& b, const std::vector<Coord>& coords, const std::vector<double>& fd,
                  const std::map<std::string, double>& scale, const std::string& what) {
  std::map<std::string, double> worst;
  for (size_t i = 0; i < coords.size(); ++i) {
    const Coord& c = coords[i];
    const double g = grad_at(b, c);
    const double bound = kRtol * std::fabs(fd[i]) + kAtolFrac * scale.at(c.name);
    const double err = std::fabs(g - fd[i]);
    const double ratio = err / bound;
    worst[c.name] = std::max(worst[c.name], std::isnan(ratio) ? INFINITY : ratio);
    EXPECT_TRUE(err <= bound) << what << ": " << c.name << " at flat index " << c.index << " (row " << c.row
                              << "): analytic " << g << " vs finite difference " << fd[i];
  }
  for (auto& [name, w] : worst)
    ::testing::Test::RecordProperty(what + "_" + name + "_worst_err_over_bound", std::to_string(w));
}

std::map<std::string, double> fd_scales(const FdTable& f) {
  std::map<std::string, double> s;
  for (size_t i = 0; i < f.coords.size(); ++i) s[f.coords[i].name] = std::max(s[f.coords[i].name], std::fabs(f.fd[i]));
  return s;
}

// The double forward equals cpu::Gdn::delta_rule (chunked and recurrent, zero state per row).
void expect_forward_matches_op(Backend& be, const Problem& p, const Bound& b, int chunk) {
  std::vector<double> ref(p.T * p.Hv * p.dv);
  for (size_t r = 0; r < p.lens.size(); ++r)
    for (int64_t h = 0; h < p.Hv; ++h) head_loss(p, static_cast<int64_t>(r), h, &ref);
  for (GdnForm form : {GdnForm::kChunked, GdnForm::kRecurrent}) {
    GdnArgs g;
    g.form = form;
    g.chunk = chunk;
    g.q = q_view(p, b.qkv);
    g.k = k_view(p, b.qkv);
    g.v = v_view(p, b.qkv);
    g.a = a_view(p, b.ab);
    g.b = b_view(p, b.ab);
    g.a_log = b.a_log;
    g.dt_bias = b.dt_bias;
    g.state = filled({static_cast<int64_t>(p.lens.size()), p.Hv, p.dk, p.dv}, 0.f);
    g.out = filled({p.T, p.Hv, p.dv}, NAN);
    g.layout = &b.layout;
    Status s = be.gdn().delta_rule(g);
    ASSERT_TRUE(s.ok()) << s.to_string();
    double worst = 0;
    for (int64_t i = 0; i < g.out.numel(); ++i) {
      const double d = std::fabs(g.out.data<float>()[i] - ref[i]);
      worst = std::isnan(d) ? INFINITY : std::max(worst, d);
    }
    EXPECT_LE(worst, 2e-5) << (form == GdnForm::kChunked ? "chunked" : "recurrent");
  }
}

// GQA (Hv = 2 Hk), dk != dv, rows of 9, 1, 21 and 16 tokens (1, and lengths that are not
// multiples of the chunk).
Problem small_problem() { return make_problem(2, 4, 8, 6, {9, 1, 21, 16}, 1234); }

TEST(GdnBackward, ReferenceForwardIsTheCpuOp) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = small_problem();
  Bound b = bind(*be, p);
  expect_forward_matches_op(*be, p, b, 4);
}

TEST(GdnBackward, MatchesFiniteDifferencesForEveryChunkSize) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = small_problem();
  const FdTable f = all_differences(p);
  const auto scale = fd_scales(f);
  std::vector<float> first;
  for (int chunk : {4, 16, 64}) {
    Bound b = bind(*be, p);
    if (!run_backward(*be, p, b, chunk)) return;
    expect_close(b, f.coords, f.fd, scale, "chunk" + std::to_string(chunk));
    std::vector<float> now(b.dqkv.data<float>(), b.dqkv.data<float>() + b.dqkv.numel());
    now.insert(now.end(), b.dab.data<float>(), b.dab.data<float>() + b.dab.numel());
    if (first.empty()) first = now;
    else EXPECT_LE(testing::max_abs_diff(first.data(), now.data(), static_cast<int64_t>(now.size())), 1e-6)
             << "chunk " << chunk << " vs chunk 4";
  }
}

// One key head per value head, dk > dv, a single row longer than two chunks.
TEST(GdnBackward, MatchesFiniteDifferencesWithoutGqa) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = make_problem(2, 2, 6, 4, {37}, 99);
  const FdTable f = all_differences(p);
  Bound b = bind(*be, p);
  if (!run_backward(*be, p, b, 16)) return;
  expect_close(b, f.coords, f.fd, fd_scales(f), "no_gqa");
}

// The 4B shape (Hk 16, Hv 32, dk = dv = 128) over 200 tokens in two rows, checked at sampled
// coordinates of every input.
TEST(GdnBackward, MatchesFiniteDifferencesAt4BShape) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = make_problem(16, 32, 128, 128, {130, 70}, 4242);
  Bound b = bind(*be, p);
  expect_forward_matches_op(*be, p, b, 64);
  if (!run_backward(*be, p, b, 64)) return;

  std::mt19937 rng(7);
  std::vector<Coord> coords;
  auto pick_qkv = [&](int64_t ch0, int64_t ch1) {
    for (int i = 0; i < 6; ++i) {
      const int64_t t = std::uniform_int_distribution<int64_t>(0, p.T - 1)(rng);
      const int64_t ch = std::uniform_int_distribution<int64_t>(ch0, ch1 - 1)(rng);
      coords.push_back(coord_of(p, true, t * p.C + ch));
    }
  };
  pick_qkv(0, p.Hk * p.dk);
  pick_qkv(p.Hk * p.dk, 2 * p.Hk * p.dk);
  pick_qkv(2 * p.Hk * p.dk, p.C);
  for (int i = 0; i < 12; ++i) {
    const int64_t t = std::uniform_int_distribution<int64_t>(0, p.T - 1)(rng);
    const int64_t ch = std::uniform_int_distribution<int64_t>(0, 2 * p.Hv - 1)(rng);
    coords.push_back(coord_of(p, false, t * 2 * p.Hv + ch));
  }
  std::vector<double> fd;
  for (const Coord& c : coords) fd.push_back(finite_difference(p, c));
  // Scale: the largest |grad| of each tensor (every element was written: none is NaN).
  std::map<std::string, double> scale;
  for (int64_t i = 0; i < p.T * p.C; ++i) {
    const Coord c = coord_of(p, true, i);
    const float g = b.dqkv.data<float>()[i];
    ASSERT_FALSE(std::isnan(g)) << c.name << " at " << i << " was not written";
    scale[c.name] = std::max(scale[c.name], static_cast<double>(std::fabs(g)));
  }
  for (int64_t i = 0; i < p.T * 2 * p.Hv; ++i) {
    const Coord c = coord_of(p, false, i);
    const float g = b.dab.data<float>()[i];
    ASSERT_FALSE(std::isnan(g)) << c.name << " at " << i << " was not written";
    scale[c.name] = std::max(scale[c.name], static_cast<double>(std::fabs(g)));
  }
  expect_close(b, coords, fd, scale, "4b");
}

TEST(GdnBackward, RejectsValueHeadsNotAMultipleOfKeyHeads) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = make_problem(2, 3, 4, 4, {5}, 1);
  Bound b = bind(*be, p);
  Status s = be->training().gdn_backward(backward_args(p, b, 4));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("not a multiple of k_heads"), std::string::npos) << s.to_string();
}

TEST(GdnBackward, RejectsANonPositiveChunk) {
  auto be = std::move(create_backend("cpu").value());
  Problem p = make_problem(1, 2, 4, 4, {5}, 1);
  Bound b = bind(*be, p);
  Status s = be->training().gdn_backward(backward_args(p, b, 0));
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("chunk 0"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln
