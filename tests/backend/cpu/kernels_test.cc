// Each CPU kernel against a direct double-precision evaluation of the formula in
// docs/model.md, on random inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::max_abs_diff;
using testing::random_tensor;
using testing::value_at;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

struct MatmulCase {
  int64_t m, n, k;
  DType w;
  bool accumulate;
};

TEST(CpuKernels, MatmulMatchesDoubleReference) {
  auto be = cpu();
  const MatmulCase cases[] = {{1, 37, 70, DType::kBF16, false}, {1, 45, 33, DType::kF16, true}, {1, 8, 16, DType::kF32, true},
                              {3, 64, 129, DType::kF16, true},
                              {8, 130, 64, DType::kF32, false},  {9, 65, 48, DType::kBF16, true},
                              {70, 200, 96, DType::kBF16, false}, {33, 17, 256, DType::kF32, true}};
  uint32_t seed = 1;
  for (const auto& c : cases) {
    Tensor x = random_tensor({c.m, c.k}, seed++);
    Tensor w = random_tensor({c.n, c.k}, seed++, 1.f, c.w);
    Tensor y = random_tensor({c.m, c.n}, seed++);
    std::vector<float> before(y.data<float>(), y.data<float>() + y.numel());
    MatmulArgs a{x, w, y};
    a.accumulate = c.accumulate;
    ASSERT_TRUE(be->linear().matmul(a).ok());
    std::vector<float> ref(static_cast<size_t>(c.m * c.n));
    for (int64_t i = 0; i < c.m; ++i)
      for (int64_t j = 0; j < c.n; ++j) {
        double s = c.accumulate ? before[i * c.n + j] : 0.0;
        for (int64_t e = 0; e < c.k; ++e) s += double(x.data<float>()[i * c.k + e]) * value_at(w, j * c.k + e);
        ref[i * c.n + j] = static_cast<float>(s);
      }
    EXPECT_LT(max_abs_diff(y.data<float>(), ref.data(), c.m * c.n), 2e-4) << "m=" << c.m << " n=" << c.n;
  }
}

TEST(CpuKernels, MatmulWritesStridedRows) {
  auto be = cpu();
  Tensor x = random_tensor({4, 32}, 5);
  Tensor w = random_tensor({6, 32}, 6);
  Tensor wide = Tensor::empty({4, 10}, DType::kF32);
  for (int64_t i = 0; i < wide.numel(); ++i) wide.data<float>()[i] = -7.f;
  Tensor out = wide.slice(1, 2, 8);  // rows 10 apart
  ASSERT_TRUE(be->linear().matmul({x, w, out}).ok());
  for (int64_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wide.data<float>()[i * 10 + 0], -7.f);
    EXPECT_EQ(wide.data<float>()[i * 10 + 9], -7.f);
    double s = 0;
    for (int e = 0; e < 32; ++e) s += double(x.data<float>()[i * 32 + e]) * w.data<float>()[1 * 32 + e];
    EXPECT_NEAR(wide.data<float>()[i * 10 + 3], s, 1e-4);
  }
}

TEST(CpuKernels, RmsNormKinds) {
  auto be = cpu();
  const int64_t R = 5, W = 48;
  Tensor x = random_tensor({R, W}, 11), w = random_tensor({W}, 12), z = random_tensor({R, W}, 13);
  Tensor res = random_tensor({R, W}, 14);
  std::vector<float> res0(res.data<float>(), res.data<float>() + R * W);
  for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated}) {
    for (bool fused : {false, true}) {
      if (kind == NormKind::kGated && fused) continue;
      std::copy(res0.begin(), res0.end(), res.data<float>());
      Tensor out = Tensor::empty({R, W}, DType::kF32);
      NormArgs a{kind, x, fused ? res : Tensor(), w, kind == NormKind::kGated ? z : Tensor(), out, 1e-6f};
      ASSERT_TRUE(be->norm().rms_norm(a).ok());
      for (int64_t i = 0; i < R; ++i) {
        std::vector<double> in(W);
        for (int64_t j = 0; j < W; ++j) in[j] = double(x.data<float>()[i * W + j]) + (fused ? res0[i * W + j] : 0.0);
        double ss = 0;
        for (double v : in) ss += v * v;
        const double inv = 1.0 / std::sqrt(ss / W + 1e-6);
        for (int64_t j = 0; j < W; ++j) {
          const double wj = w.data<float>()[j];
          double expect = in[j] * inv;
          if (kind == NormKind::kOnePlus) expect *= 1.0 + wj;
          if (kind == NormKind::kPlain) expect *= wj;
          if (kind == NormKind::kGated) {
            const double zj = z.data<float>()[i * W + j];
            expect *= wj * zj / (1.0 + std::exp(-zj));
          }
          EXPECT_NEAR(out.data<float>()[i * W + j], expect, 1e-5);
          if (fused) {
            EXPECT_NEAR(res.data<float>()[i * W + j], in[j], 1e-6);
          }
        }
      }
    }
  }
}

TEST(CpuKernels, PartialRopeRotatesOnlyLeadingDims) {
  auto be = cpu();
  const int64_t T = 3, Hq = 2, Hk = 1, D = 16, rot = 4;
  Tensor q = random_tensor({T, Hq, D}, 21), k = random_tensor({T, Hk, D}, 22);
  Tensor q0 = Tensor::empty({T, Hq, D}, DType::kF32);
  std::copy(q.data<float>(), q.data<float>() + q.numel(), q0.data<float>());
  Tensor pos = Tensor::from_values(std::vector<int32_t>{0, 5, 1000}, {T});
  ASSERT_TRUE(be->attention().rope({q, k, pos, rot, 10000.f}).ok());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < Hq; ++h) {
      const float* a = q0.data<float>() + (t * Hq + h) * D;
      const float* b = q.data<float>() + (t * Hq + h) * D;
      for (int64_t i = 0; i < rot / 2; ++i) {
        const double ang = pos.data<int32_t>()[t] * std::pow(10000.0, -2.0 * i / rot);
        EXPECT_NEAR(b[i], a[i] * std::cos(ang) - a[i + rot / 2] * std::sin(ang), 2e-4);
        EXPECT_NEAR(b[i + rot / 2], a[i + rot / 2] * std::cos(ang) + a[i] * std::sin(ang), 2e-4);
      }
      for (int64_t i = rot; i < D; ++i) EXPECT_EQ(b[i], a[i]);
    }
}

// Paged causal GQA attention over K/V scattered across non-contiguous blocks, two rows.
TEST(CpuKernels, PagedAttentionMatchesDirectSoftmax) {
  auto be = cpu();
  const int64_t Hq = 4, Hkv = 2, D = 8, bs = 4;
  const std::vector<int64_t> past = {5, 0}, news = {3, 6};
  HostBatchLayout h;
  h.block_size = bs;
  std::vector<std::vector<int32_t>> blocks = {{6, 1, 3}, {0, 4}};
  for (int r = 0; r < 2; ++r) h.add_row(past[r], news[r], blocks[r], r);
  StorageFacet& st = be->storage();
  auto bl = make_batch_layout(h, st).value();
  Tensor kc = random_tensor({8, bs, Hkv, D}, 31), vc = random_tensor({8, bs, Hkv, D}, 32);
  const int64_t T = 9;
  Tensor q = random_tensor({T, Hq, D}, 33), gate = random_tensor({T, Hq, D}, 34);
  Tensor knew = random_tensor({T, Hkv, D}, 35), vnew = random_tensor({T, Hkv, D}, 36);
  ASSERT_TRUE(be->attention().write_kv({knew, vnew, kc, vc, bl.slot_mapping}).ok());
  Tensor out = Tensor::empty({T, Hq, D}, DType::kF32);
  const float scale = 0.35f;
  ASSERT_TRUE(be->attention().attend({q, gate, out, kc, vc, &bl, scale}).ok());
  int64_t t = 0;
  for (int r = 0; r < 2; ++r)
    for (int64_t i = 0; i < news[r]; ++i, ++t) {
      // New tokens must have landed in their slots.
      const int64_t p = past[r] + i;
      const int64_t slot = blocks[r][p / bs] * bs + p % bs;
      EXPECT_EQ(kc.data<float>()[slot * Hkv * D + D + 3], knew.data<float>()[(t * Hkv + 1) * D + 3]);
      for (int64_t hq = 0; hq < Hq; ++hq) {
        const int64_t kvh = hq / 2;
        std::vector<double> s(p + 1);
        double mx = -1e30, sum = 0;
        for (int64_t j = 0; j <= p; ++j) {
          const int64_t sl = blocks[r][j / bs] * bs + j % bs;
          double d = 0;
          for (int64_t e = 0; e < D; ++e)
            d += double(q.data<float>()[(t * Hq + hq) * D + e]) * kc.data<float>()[(sl * Hkv + kvh) * D + e];
          s[j] = d * scale;
          mx = std::max(mx, s[j]);
        }
        for (auto& v : s) sum += (v = std::exp(v - mx));
        for (int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (int64_t j = 0; j <= p; ++j) {
            const int64_t sl = blocks[r][j / bs] * bs + j % bs;
            o += s[j] / sum * vc.data<float>()[(sl * Hkv + kvh) * D + e];
          }
          const double g = gate.data<float>()[(t * Hq + hq) * D + e];
          EXPECT_NEAR(out.data<float>()[(t * Hq + hq) * D + e], o / (1 + std::exp(-g)), 1e-5);
        }
      }
    }
}

// A prompt convolved in two pieces (state carried between them) equals one pass; both equal
// the direct formula with zero history.
TEST(CpuKernels, CausalConvContinuesFromState) {
  auto be = cpu();
  const int64_t C = 12, K = 4, n = 9;
  Tensor x = random_tensor({n, C}, 41), w = random_tensor({C, K}, 42);
  auto run = [&](std::vector<int64_t> pieces) {
    Tensor state = Tensor::empty({2, K - 1, C}, DType::kF32);
    Tensor out = Tensor::empty({n, C}, DType::kF32);
    int64_t done = 0;
    for (int64_t len : pieces) {
      HostBatchLayout h;
      h.add_row(done, len, {0}, 1);
      auto bl = make_batch_layout(h, be->storage()).value();
      EXPECT_TRUE(be->conv().causal_conv1d({x.slice(0, done, done + len), w, state, out.slice(0, done, done + len), &bl}).ok());
      done += len;
    }
    return out;
  };
  Tensor whole = run({n}), split = run({4, 1, 4});
  EXPECT_EQ(max_abs_diff(whole.data<float>(), split.data<float>(), n * C), 0.0);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t c = 0; c < C; ++c) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        int64_t src = t - (K - 1) + k;
        if (src >= 0) acc += double(w.data<float>()[c * K + k]) * x.data<float>()[src * C + c];
      }
      EXPECT_NEAR(whole.data<float>()[t * C + c], acc / (1 + std::exp(-acc)), 1e-5);
    }
}

// The definition of each binary op of backend/elementwise_ops.h, in double precision.
double binary_reference(ElementwiseOp op, double a, double b) {
  switch (op) {
    case ElementwiseOp::kAdd: return a + b;
    case ElementwiseOp::kSiluMul: return a / (1 + std::exp(-a)) * b;
    default: ADD_FAILURE() << "no reference for op " << int(op); return NAN;
  }
}

TEST(CpuKernels, BinaryOpsMatchTheirDefinitionsOnStridedRows) {
  auto be = cpu();
  uint32_t seed = 60;
  for (const BinaryOpInfo& info : kBinaryOps) {
    SCOPED_TRACE(std::string(info.name));
    Tensor wide = random_tensor({5, 41}, seed++, 4.f);
    Tensor a = wide.slice(1, 2, 39);  // rows 41 apart
    Tensor b = random_tensor({5, 37}, seed++, 4.f);
    Tensor out = Tensor::empty({5, 37}, DType::kF32);
    ASSERT_TRUE(be->elementwise().binary({info.op, a, b, out}).ok());
    for (int64_t i = 0; i < 5; ++i)
      for (int64_t j = 0; j < 37; ++j) {
        const double want = binary_reference(info.op, wide.data<float>()[i * 41 + 2 + j], b.data<float>()[i * 37 + j]);
        EXPECT_NEAR(out.data<float>()[i * 37 + j], want, 1e-6 * (1 + std::abs(want))) << "row " << i << " col " << j;
      }
  }
  Tensor x = random_tensor({2, 4}, 1);
  Status s = be->elementwise().binary({ElementwiseOp::kEmbed, x, x, x});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("embed is not a binary op"), std::string::npos) << s.to_string();
}

TEST(CpuKernels, EmbedAndArgmax) {
  auto be = cpu();
  Tensor table = random_tensor({10, 6}, 51, 1.f, DType::kBF16);
  Tensor ids = Tensor::from_values(std::vector<int32_t>{3, 9, 0}, {3});
  Tensor out = Tensor::empty({3, 6}, DType::kF32);
  ASSERT_TRUE(be->elementwise().embed({ids, table, out}).ok());
  for (int j = 0; j < 6; ++j) EXPECT_EQ(out.data<float>()[6 + j], value_at(table, 9 * 6 + j));
  Tensor bad = Tensor::from_values(std::vector<int32_t>{10}, {1});
  auto s = be->elementwise().embed({bad, table, out.slice(0, 0, 1)});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("token id 10"), std::string::npos);

  Tensor logits = Tensor::from_values(std::vector<float>{1, 5, 5, -2, NAN, 0, 3, 3}, {2, 4});
  Tensor best = Tensor::empty({2}, DType::kI32);
  ASSERT_TRUE(be->sampling().argmax({logits, best}).ok());
  EXPECT_EQ(best.data<int32_t>()[0], 1);  // first of the tied maxima
  EXPECT_EQ(best.data<int32_t>()[1], 2);  // NaN never wins
}

}  // namespace
}  // namespace kiln
