// The CPU optimizer steps against an independent double-precision reading of docs/training.md
// ("Optimizers"): Muon with the Newton-Schulz iteration written literally (A = X X^T on the rows,
// even when they are the larger side, so agreement checks the facet's Gram-space form), AdamW
// and SGD over several steps with state, hand-computed values for SGD and one AdamW step, the
// orthogonalisation property of NS5, and declines that name the bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/registry.h"
#include "backend/training_facets.h"

namespace kiln {
namespace {

using Mat = std::vector<double>;  // row-major

std::unique_ptr<Backend> cpu() {
  auto b = create_backend("cpu");
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

Tensor host(const std::vector<float>& v, int64_t rows, int64_t cols) {
  return Tensor::from_values(v, rows == 1 ? Shape{cols} : Shape{rows, cols});
}
std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// ---- the reference: docs/training.md ("Optimizers") read literally, in double ----
Mat matmul(const Mat& a, const Mat& b, int64_t n, int64_t k, int64_t m, bool trans_b = false) {
  Mat c(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double s = 0;
      for (int64_t l = 0; l < k; ++l) s += a[i * k + l] * (trans_b ? b[j * k + l] : b[l * m + j]);
      c[i * m + j] = s;
    }
  return c;
}

// X = b / ||b||_F; 5 times: A = X X^T, B = b_ A + c_ A A, X = a X + B X. Always X X^T: for a tall
// matrix this is the larger Gram matrix.
Mat newton_schulz_literal(Mat x, int64_t rows, int64_t cols, int steps) {
  const double a = 3.4445, b = -4.7750, c = 2.0315;
  double norm = 0;
  for (double v : x) norm += v * v;
  norm = std::sqrt(norm);
  for (double& v : x) v /= norm;
  for (int it = 0; it < steps; ++it) {
    const Mat A = matmul(x, x, rows, cols, rows, /*trans_b=*/true);
    const Mat AA = matmul(A, A, rows, rows, rows);
    Mat B(rows * rows);
    for (size_t i = 0; i < B.size(); ++i) B[i] = b * A[i] + c * AA[i];
    const Mat BX = matmul(B, x, rows, rows, cols);
    for (size_t i = 0; i < x.size(); ++i) x[i] = a * x[i] + BX[i];
  }
  return x;
}

struct RefState {
  Mat p, m, v;
};

void ref_step(OptimizerKind kind, RefState& s, const Mat& g, int64_t rows, int64_t cols, const OptimizerHyper& h, int64_t t) {
  const size_t n = s.p.size();
  const double lr = h.lr, wd = h.weight_decay;
  if (kind == OptimizerKind::kSgd) {
    for (size_t i = 0; i < n; ++i) s.p[i] = s.p[i] * (1 - lr * wd) - lr * g[i];
  } else if (kind == OptimizerKind::kAdamW) {
    for (size_t i = 0; i < n; ++i) {
      s.m[i] = h.beta1 * s.m[i] + (1 - static_cast<double>(h.beta1)) * g[i];
      s.v[i] = h.beta2 * s.v[i] + (1 - static_cast<double>(h.beta2)) * g[i] * g[i];
      const double mh = s.m[i] / (1 - std::pow(static_cast<double>(h.beta1), t));
      const double vh = s.v[i] / (1 - std::pow(static_cast<double>(h.beta2), t));
      s.p[i] = s.p[i] * (1 - lr * wd) - lr * mh / (std::sqrt(vh) + h.eps);
    }
  } else {
    Mat b(n);
    for (size_t i = 0; i < n; ++i) {
      s.m[i] = h.momentum * s.m[i] + g[i];
      b[i] = h.nesterov ? g[i] + h.momentum * s.m[i] : s.m[i];
    }
    Mat o = b;
    if (rows > 1 && cols > 1) {
      o = newton_schulz_literal(b, rows, cols, h.ns_steps);
      for (double& x : o) x *= std::sqrt(static_cast<double>(std::max(rows, cols)));
    }
    for (size_t i = 0; i < n; ++i) s.p[i] = s.p[i] * (1 - lr * wd) - lr * o[i];
  }
}

struct Case {
  OptimizerKind kind;
  int64_t rows, cols;
  OptimizerHyper hyper;
};

// Runs `steps` steps of the facet and of the reference from the same start and gradients and
// checks, after each step, the largest |difference| of the parameters relative to the largest
// parameter change of that step.
void check_against_reference(const Case& c, int steps, double tol) {
  auto backend = cpu();
  const int64_t n = c.rows * c.cols;
  std::vector<float> p0 = randn(n, 1), zeros(n, 0.f);
  Tensor p = host(p0, c.rows, c.cols), m = host(zeros, c.rows, c.cols), v = host(zeros, c.rows, c.cols);
  RefState ref{Mat(p0.begin(), p0.end()), Mat(n, 0.0), Mat(n, 0.0)};
  for (int t = 1; t <= steps; ++t) {
    const std::vector<float> g = randn(n, 100 + t, 0.3f);
    const Mat before = ref.p;
    OptimizerStepArgs a;
    a.kind = c.kind;
    a.param = p;
    a.grad = host(g, c.rows, c.cols);
    a.m = m;
    a.v = v;
    a.hyper = c.hyper;
    a.step = t;
    ASSERT_TRUE(backend->optimizer().step(a).ok());
    ref_step(c.kind, ref, Mat(g.begin(), g.end()), c.rows, c.cols, c.hyper, t);
    double change = 0, err = 0;
    for (int64_t i = 0; i < n; ++i) {
      change = std::max(change, std::fabs(ref.p[i] - before[i]));
      err = std::max(err, std::fabs(ref.p[i] - p.data<float>()[i]));
    }
    ASSERT_GT(change, 0.0);
    // Continue the reference from the facet's f32 parameters (its state m, v stays its own), so
    // each step's comparison is of that step's arithmetic, not of the parameters' past rounding.
    for (int64_t i = 0; i < n; ++i) ref.p[i] = p.data<float>()[i];
    EXPECT_LT(err / change, tol) << optimizer_kind_name(c.kind) << " [" << c.rows << ", " << c.cols << "] step " << t
                                 << ": max error " << err << " for a change of " << change;
  }
}

TEST(Optimizer, MuonMatchesLiteralNewtonSchulzWideAndTall) {
  OptimizerHyper h;
  h.lr = 0.02f;
  h.weight_decay = 0.1f;
  // [r, in] (the Gram side is the rows), [out, r] (the facet iterates on X^T X; the reference on
  // the 24 x 24 X X^T), square, and a single-row vector (no orthogonalisation).
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{4, 24}, {24, 4}, {6, 6}, {1, 8}})
    check_against_reference({OptimizerKind::kMuon, rows, cols, h}, 4, 2e-5);
}

TEST(Optimizer, MuonWithoutNesterovMatchesReference) {
  OptimizerHyper h;
  h.lr = 0.01f;
  h.nesterov = false;
  h.momentum = 0.9f;
  check_against_reference({OptimizerKind::kMuon, 3, 17, h}, 4, 2e-5);
  check_against_reference({OptimizerKind::kMuon, 17, 3, h}, 4, 2e-5);
}

TEST(Optimizer, AdamWMatchesReferenceOverSteps) {
  OptimizerHyper h;
  h.lr = 0.01f;
  h.weight_decay = 0.05f;
  check_against_reference({OptimizerKind::kAdamW, 5, 7, h}, 6, 1e-4);
}

TEST(Optimizer, SgdMatchesReferenceOverSteps) {
  OptimizerHyper h;
  h.lr = 0.1f;
  h.weight_decay = 0.01f;
  check_against_reference({OptimizerKind::kSgd, 3, 5, h}, 3, 1e-5);
}

TEST(Optimizer, SgdHandComputed) {
  auto backend = cpu();
  Tensor p = host({1.f, -2.f, 0.5f}, 1, 3);
  OptimizerStepArgs a;
  a.kind = OptimizerKind::kSgd;
  a.param = p;
  a.grad = host({0.1f, 0.2f, -0.4f}, 1, 3);
  a.hyper.lr = 0.5f;
  ASSERT_TRUE(backend->optimizer().step(a).ok());
  // p - 0.5 g
  EXPECT_FLOAT_EQ(p.data<float>()[0], 0.95f);
  EXPECT_FLOAT_EQ(p.data<float>()[1], -2.1f);
  EXPECT_FLOAT_EQ(p.data<float>()[2], 0.7f);
  a.hyper.weight_decay = 0.1f;  // decay factor 1 - 0.5 * 0.1 = 0.95
  ASSERT_TRUE(backend->optimizer().step(a).ok());
  EXPECT_FLOAT_EQ(p.data<float>()[0], 0.95f * 0.95f - 0.05f);  // 0.8525
  EXPECT_FLOAT_EQ(p.data<float>()[1], -2.1f * 0.95f - 0.1f);   // -2.095
  EXPECT_FLOAT_EQ(p.data<float>()[2], 0.7f * 0.95f + 0.2f);    // 0.865
}

TEST(Optimizer, AdamWFirstStepHandComputed) {
  auto backend = cpu();
  Tensor p = host({1.f, -0.5f}, 1, 2), m = host({0.f, 0.f}, 1, 2), v = host({0.f, 0.f}, 1, 2);
  OptimizerStepArgs a;
  a.kind = OptimizerKind::kAdamW;
  a.param = p;
  a.grad = host({0.2f, -0.05f}, 1, 2);
  a.m = m;
  a.v = v;
  a.hyper.lr = 0.1f;
  a.hyper.weight_decay = 0.01f;
  a.step = 1;
  ASSERT_TRUE(backend->optimizer().step(a).ok());
  // m = (1 - beta1) g, v = (1 - beta2) g^2 (beta2 = 0.999f is 0.99900001287, so 1 - beta2 is
  // 9.9998713e-4, not 1e-3); bias-corrected they are g and g^2, so the step is lr g / (|g| + eps).
  EXPECT_FLOAT_EQ(m.data<float>()[0], 0.02f);
  EXPECT_FLOAT_EQ(m.data<float>()[1], -0.005f);
  EXPECT_NEAR(v.data<float>()[0], 9.9998713e-4 * 0.04, 1e-11);
  EXPECT_NEAR(v.data<float>()[1], 9.9998713e-4 * 0.0025, 1e-12);
  // 1 * (1 - 0.1 * 0.01) - 0.1 * 0.2 / (0.2 + 1e-8) = 0.999 - 0.099999995 = 0.899000005
  EXPECT_NEAR(p.data<float>()[0], 0.899000005, 2e-7);
  // -0.5 * 0.999 + 0.1 * 0.05 / (0.05 + 1e-8) = -0.4995 + 0.09999998 = -0.39950002
  EXPECT_NEAR(p.data<float>()[1], -0.39950002, 2e-7);
}

// Singular values of the rows x cols matrix x, in double: square roots of the eigenvalues of the
// smaller Gram matrix, by cyclic Jacobi rotations.
std::vector<double> singular_values(const std::vector<float>& x, int64_t rows, int64_t cols) {
  const int64_t s = std::min(rows, cols);
  Mat g(s * s, 0.0);
  for (int64_t i = 0; i < s; ++i)
    for (int64_t j = 0; j < s; ++j)
      for (int64_t k = 0; k < std::max(rows, cols); ++k)
        g[i * s + j] += rows <= cols ? static_cast<double>(x[i * cols + k]) * x[j * cols + k]
                                     : static_cast<double>(x[k * cols + i]) * x[k * cols + j];
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0;
    for (int64_t p = 0; p < s; ++p)
      for (int64_t q = p + 1; q < s; ++q) off += g[p * s + q] * g[p * s + q];
    if (off < 1e-24) break;
    for (int64_t p = 0; p < s; ++p)
      for (int64_t q = p + 1; q < s; ++q) {
        if (std::fabs(g[p * s + q]) < 1e-300) continue;
        const double theta = (g[q * s + q] - g[p * s + p]) / (2 * g[p * s + q]);
        const double t = (theta >= 0 ? 1 : -1) / (std::fabs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), sn = t * c;
        for (int64_t k = 0; k < s; ++k) {  // G = J^T G J
          const double gkp = g[k * s + p], gkq = g[k * s + q];
          g[k * s + p] = c * gkp - sn * gkq;
          g[k * s + q] = sn * gkp + c * gkq;
        }
        for (int64_t k = 0; k < s; ++k) {
          const double gpk = g[p * s + k], gqk = g[q * s + k];
          g[p * s + k] = c * gpk - sn * gqk;
          g[q * s + k] = sn * gpk + c * gqk;
        }
      }
  }
  std::vector<double> sv;
  for (int64_t i = 0; i < s; ++i) sv.push_back(std::sqrt(std::max(0.0, g[i * s + i])));
  return sv;
}

TEST(Optimizer, MuonOrthogonalisesTheUpdate) {
  // With lr 1, no momentum and p = 0, the step leaves p = -sqrt(max(rows, cols)) * NS5(g): the
  // singular values of NS5(g) land near 1 (the quintic's coefficients trade exactness for speed).
  auto backend = cpu();
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{8, 64}, {64, 8}, {16, 16}}) {
    const int64_t n = rows * cols;
    Tensor p = host(std::vector<float>(n, 0.f), rows, cols), m = host(std::vector<float>(n, 0.f), rows, cols);
    OptimizerStepArgs a;
    a.kind = OptimizerKind::kMuon;
    a.param = p;
    a.grad = host(randn(n, 7), rows, cols);
    a.m = m;
    a.hyper.lr = 1.f;
    a.hyper.momentum = 0.f;
    ASSERT_TRUE(backend->optimizer().step(a).ok());
    std::vector<float> o = values(p);
    for (float& x : o) x /= -std::sqrt(static_cast<float>(std::max(rows, cols)));
    // The input's own singular values spread over a wide range; the output's do not.
    const auto in = singular_values(values(a.grad), rows, cols);
    EXPECT_GT(*std::max_element(in.begin(), in.end()) / *std::min_element(in.begin(), in.end()), 1.5);
    for (double s : singular_values(o, rows, cols)) {
      EXPECT_GT(s, 0.65) << "[" << rows << ", " << cols << "]";
      EXPECT_LT(s, 1.25) << "[" << rows << ", " << cols << "]";
    }
  }
}

TEST(Optimizer, ZeroGradientLeavesMuonParameterWhereDecayPutsIt) {
  // B = 0 at init gives A a zero gradient on the first step: NS of 0 is 0, not 0/0.
  auto backend = cpu();
  Tensor p = host({1.f, 2.f, 3.f, 4.f}, 2, 2), m = host({0.f, 0.f, 0.f, 0.f}, 2, 2);
  OptimizerStepArgs a;
  a.kind = OptimizerKind::kMuon;
  a.param = p;
  a.grad = host({0.f, 0.f, 0.f, 0.f}, 2, 2);
  a.m = m;
  a.hyper.lr = 0.1f;
  a.hyper.weight_decay = 0.5f;
  ASSERT_TRUE(backend->optimizer().step(a).ok());
  EXPECT_FLOAT_EQ(p.data<float>()[0], 0.95f);
  EXPECT_FLOAT_EQ(p.data<float>()[3], 3.8f);
}

TEST(Optimizer, DeclinesAndRejectsNamingTheInput) {
  auto backend = cpu();
  OptimizerFacet& opt = backend->optimizer();
  EXPECT_TRUE(opt.supports({OptimizerKind::kMuon, 4, 8}).runs_natively());
  EXPECT_TRUE(opt.supports({OptimizerKind::kAdamW, 1, 8}).runs_natively());
  const Support empty = opt.supports({OptimizerKind::kSgd, 0, 8});
  EXPECT_FALSE(empty.runs_natively());
  EXPECT_NE(empty.constraint.find("[0, 8]"), std::string::npos) << empty.constraint;

  OptimizerStepArgs a;
  a.kind = OptimizerKind::kAdamW;
  a.param = host(std::vector<float>(6, 0.f), 2, 3);
  a.grad = host(std::vector<float>(6, 0.f), 2, 3);
  a.m = host(std::vector<float>(6, 0.f), 3, 2);  // transposed: wrong shape
  a.v = host(std::vector<float>(6, 0.f), 2, 3);
  Status s = opt.step(a);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("'m'"), std::string::npos) << s.message();

  a.m = host(std::vector<float>(6, 0.f), 2, 3);
  a.v = Tensor();
  s = opt.step(a);
  EXPECT_NE(s.message().find("'v' is missing"), std::string::npos) << s.message();

  a.v = host(std::vector<float>(6, 0.f), 2, 3);
  a.step = 0;
  s = opt.step(a);
  EXPECT_NE(s.message().find("step"), std::string::npos) << s.message();

  a.step = 1;
  a.grad = Tensor::empty({2, 3}, DType::kBF16);
  s = opt.step(a);
  EXPECT_NE(s.message().find("'grad'"), std::string::npos) << s.message();

  a.grad = host(std::vector<float>(6, 0.f), 2, 3);
  a.param = Tensor::empty({1, 2, 3}, DType::kF32);
  s = opt.step(a);
  EXPECT_NE(s.message().find("'param'"), std::string::npos) << s.message();

  OptimizerStepArgs e;
  e.kind = OptimizerKind::kSgd;
  e.param = Tensor::empty({0}, DType::kF32);
  e.grad = Tensor::empty({0}, DType::kF32);
  s = opt.step(e);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
}

}  // namespace
}  // namespace kiln
