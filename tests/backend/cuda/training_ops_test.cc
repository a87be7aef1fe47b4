// The CUDA training facet's ops and optimizer steps against the CPU facet (the f32 reference,
// itself checked against finite differences and PEFT) on the same random inputs, over shape
// tables with the Qwen3.5-4B shapes (hidden 2560, intermediate 9216, head_dim 256 with
// rotary_dim 64, 16 q / 4 kv heads, GDN conv channels 8192 kernel 4, LoRA factors of rank 8, 16,
// 64 and 256) and small odd ones (one row, ragged rows, strided rows). The error measure is
// max|cuda - cpu| / max|cpu|. Tolerances:
//   1e-5  every f32 op: the results differ only in f32 summation order (cuBLAS / OpenBLAS blocking,
//         block-tree reductions / the CPU's sequential or double sums) and 1-ulp libm differences;
//   1e-2  gemm with a bf16/f16 b: the CUDA path rounds op(a) to b's dtype (unit roundoff 2^-8 for
//         bf16) before the tensor-core GEMM, the CPU keeps a in f32; over k products of random
//         signs the error is ~2^-9 sqrt(k) against an output of ~sqrt(k): ~2e-3 relative, 1e-2
//         leaves room for the heavier tails of the largest outputs;
//   1e-5  the optimizers over 3 steps, state included (m, v), and for Muon the update itself
//         (param - initial param): both Newton-Schulz-5 implementations accumulate in double and
//         round the iterate to f32 after each step; the same with a gradient scale (clipping);
//   1e-12 the gradients' sum of squares: double sums of f32 squares in another order.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/batch_layout.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/training_facets.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::rel_error;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 1e-5;
constexpr double kHalfTol = 1e-2;
constexpr double kOptTol = 1e-5;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

using Pair = testing::DevicePair;

// A [rows, cols] f32 view whose rows are `pad` elements longer than cols when strided.
Pair rows_view(Backend& be, int64_t rows, int64_t cols, bool strided, uint32_t seed, float scale = 1.f) {
  const int64_t pad = strided ? 3 : 0;
  Pair base(be, random_tensor({rows, cols + pad}, seed, scale));
  return base.view(base.host_base.slice(1, pad, pad + cols));
}

void expect_ok(const Status& s) { EXPECT_TRUE(s.ok()) << s.to_string(); }

// ---------------------------------------------------------------- gemm

struct GemmCase {
  const char* name;
  int64_t m, n, k;
  bool trans_a, trans_b;
  DType b;
  bool accumulate;
  float alpha;
  bool strided;
};

TEST(CudaTrainingOps, Gemm) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const GemmCase cases[] = {
      // LoRA A on the 4B hidden: h = x A^T, dA = dh^T x, dx += dh A.
      {"h = x A^T r16", 64, 16, 2560, false, true, DType::kF32, false, 1.f, false},
      {"dA = dh^T x r16", 16, 2560, 64, true, false, DType::kF32, true, 0.5f, false},
      {"dx += dh A r64", 33, 2560, 64, false, false, DType::kF32, true, 1.f, true},
      // LoRA B of a [9216, r] factor: y = h B^T, dB = dy^T h, dh = dy B.
      {"y = h B^T r8", 40, 9216, 8, false, true, DType::kF32, false, 2.f, false},
      {"dB = dy^T h r8", 9216, 8, 40, true, false, DType::kF32, false, 1.f, false},
      {"dh = dy B r16", 40, 16, 9216, false, false, DType::kF32, false, 1.f, true},
      // The frozen weight: dX = dY W, W [n_out, k_in] bf16/f16 untransposed.
      {"dX = dY W[9216, 2560] bf16", 37, 2560, 9216, false, false, DType::kBF16, true, 1.f, true},
      {"dX = dY W[2560, 9216] bf16", 21, 9216, 2560, false, false, DType::kBF16, false, 1.f, false},
      {"dX = dY W f16 m=1", 1, 2560, 512, false, false, DType::kF16, false, 1.f, false},
      // All four transpose combinations, f32 and bf16, odd sizes, one row, strided rows.
      {"NN odd", 5, 7, 3, false, false, DType::kF32, false, 1.f, true},
      {"NT odd", 5, 7, 3, false, true, DType::kF32, true, -1.5f, true},
      {"TN odd", 5, 7, 3, true, false, DType::kF32, true, 0.25f, true},
      {"TT odd", 5, 7, 3, true, true, DType::kF32, false, 1.f, true},
      {"NN m=1", 1, 300, 129, false, false, DType::kF32, true, 1.f, true},
      {"NN bf16", 6, 11, 130, false, false, DType::kBF16, false, 1.f, true},
      {"NT bf16", 6, 11, 130, false, true, DType::kBF16, true, 0.75f, true},
      {"TN bf16", 6, 11, 130, true, false, DType::kBF16, true, 1.f, true},
      {"TT bf16", 6, 11, 130, true, true, DType::kBF16, false, -2.f, true},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << c.name << " m=" << c.m << " n=" << c.n << " k=" << c.k);
    Pair a = c.trans_a ? rows_view(*be, c.k, c.m, c.strided, seed++) : rows_view(*be, c.m, c.k, c.strided, seed++);
    const Shape bs = c.trans_b ? Shape{c.n, c.k} : Shape{c.k, c.n};
    Pair b;
    if (c.b == DType::kF32 && c.strided) b = rows_view(*be, bs[0], bs[1], true, seed++);
    else b = Pair(*be, random_tensor(bs, seed++, 1.f, c.b));  // a 16-bit b is contiguous (a frozen weight)
    Pair out = rows_view(*be, c.m, c.n, c.strided, seed++);
    GemmArgs ha{a.host, b.host, out.host, c.trans_a, c.trans_b, c.alpha, c.accumulate};
    GemmArgs da{a.dev, b.dev, out.dev, c.trans_a, c.trans_b, c.alpha, c.accumulate};
    expect_ok(ref->training().gemm(ha));
    const Status s = be->training().gemm(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const double err = out.error(*be);  // the padding columns are compared too: they must be untouched
    EXPECT_LE(err, c.b == DType::kF32 ? kF32Tol : kHalfTol);
    std::printf("gemm %-26s %s: rel err %.3g\n", c.name, std::string(dtype_name(c.b)).c_str(), err);
  }
}

// ---------------------------------------------------------------- norm backward

struct NormCase {
  const char* name;
  NormKind kind;
  int64_t rows, width;
  bool strided, in_place, accumulate;
};

TEST(CudaTrainingOps, NormBackward) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const NormCase cases[] = {
      {"4B hidden (1 + w)", NormKind::kOnePlus, 7, 2560, false, false, false},
      {"4B hidden accumulate, strided", NormKind::kOnePlus, 9, 2560, true, false, true},
      {"4B q norm in place (16 heads x 3 tokens)", NormKind::kOnePlus, 48, 256, false, true, false},
      {"4B k norm in place, strided", NormKind::kOnePlus, 12, 256, true, true, false},
      {"plain w", NormKind::kPlain, 5, 1000, true, false, false},
      {"plain w, one row, odd width", NormKind::kPlain, 1, 9, false, false, true},
      {"gated (GDN out, 4B dv 128)", NormKind::kGated, 96, 128, false, false, false},
      {"gated in place, strided", NormKind::kGated, 4, 130, true, true, false},
      {"gated accumulate", NormKind::kGated, 3, 33, false, false, true},
      {"(1 + w), 75 rows of 200 in place, strided", NormKind::kOnePlus, 75, 200, true, true, true},
  };
  uint32_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    Pair x = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair w(*be, random_tensor({c.width}, seed++, 0.5f));
    Pair gate = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair dout = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair dx = c.in_place ? dout : rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair dgate = rows_view(*be, c.rows, c.width, c.strided, seed++);
    const bool gated = c.kind == NormKind::kGated;
    NormBackwardArgs ha, da;
    ha.kind = da.kind = c.kind;
    ha.x = x.host, da.x = x.dev;
    ha.weight = w.host, da.weight = w.dev;
    if (gated) ha.gate = gate.host, da.gate = gate.dev, ha.dgate = dgate.host, da.dgate = dgate.dev;
    ha.dout = dout.host, da.dout = dout.dev;
    ha.dx = dx.host, da.dx = dx.dev;
    ha.accumulate = da.accumulate = c.accumulate;
    expect_ok(ref->training().norm_backward(ha));
    const Status s = be->training().norm_backward(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const double err = dx.error(*be);
    EXPECT_LE(err, kF32Tol) << "dx";
    if (gated) { EXPECT_LE(dgate.error(*be), kF32Tol) << "dgate"; }
    std::printf("norm_backward %-42s: rel err %.3g\n", c.name, err);
  }
}

// ---------------------------------------------------------------- silu-mul backward

TEST(CudaTrainingOps, SiluMulBackward) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t rows, width;
    bool strided;
  } cases[] = {{7, 9216, false}, {33, 9216, true}, {1, 3, false}, {5, 1000, true}};
  uint32_t seed = 200;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " width=" << c.width << (c.strided ? " strided" : ""));
    Pair a = rows_view(*be, c.rows, c.width, c.strided, seed++, 3.f);
    Pair b = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair dout = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair da = rows_view(*be, c.rows, c.width, c.strided, seed++);
    Pair db = rows_view(*be, c.rows, c.width, c.strided, seed++);
    expect_ok(ref->training().silu_mul_backward({a.host, b.host, dout.host, da.host, db.host}));
    const Status s = be->training().silu_mul_backward({a.dev, b.dev, dout.dev, da.dev, db.dev});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(da.error(*be), kF32Tol) << "da";
    EXPECT_LE(db.error(*be), kF32Tol) << "db";
  }
}

// ---------------------------------------------------------------- RoPE backward

TEST(CudaTrainingOps, RopeBackward) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    int64_t tokens, hq, hkv, d, rotary;
    bool fused;  // q and k as head views of one fused [tokens, (hq + 2 hkv) * d] projection
  } cases[] = {
      {"4B attention", 11, 16, 4, 256, 64, false},
      {"4B attention, fused qkv views", 5, 16, 4, 256, 64, true},
      {"full rotation, one token", 1, 2, 1, 8, 8, false},
      {"tiny fused", 3, 3, 1, 6, 4, true},
  };
  uint32_t seed = 300;
  std::mt19937 rng(7);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    std::vector<int32_t> pos(c.tokens);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 40000);
    Pair positions(*be, testing::host_i32(pos));
    Pair dq, dk, whole;
    if (c.fused) {
      const int64_t width = (c.hq + 2 * c.hkv) * c.d;
      whole = Pair(*be, random_tensor({c.tokens, width}, seed++));
      const std::array<int64_t, kMaxRank> st{width, c.d, 1};
      dq = whole.view(whole.host_base.as_strided({c.tokens, c.hq, c.d}, st, 0));
      dk = whole.view(whole.host_base.as_strided({c.tokens, c.hkv, c.d}, st, c.hq * c.d));
    } else {
      dq = Pair(*be, random_tensor({c.tokens, c.hq, c.d}, seed++));
      dk = Pair(*be, random_tensor({c.tokens, c.hkv, c.d}, seed++));
    }
    RopeBackwardArgs ha{dq.host, dk.host, positions.host, c.rotary, 10000000.f};
    RopeBackwardArgs da{dq.dev, dk.dev, positions.dev, c.rotary, 10000000.f};
    expect_ok(ref->training().rope_backward(ha));
    const Status s = be->training().rope_backward(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    if (c.fused) {
      EXPECT_LE(whole.error(*be), kF32Tol) << "fused dq/dk (the v part untouched)";
    } else {
      EXPECT_LE(dq.error(*be), kF32Tol) << "dq";
      EXPECT_LE(dk.error(*be), kF32Tol) << "dk";
    }
  }
}

// ---------------------------------------------------------------- conv backward

TEST(CudaTrainingOps, ConvBackward) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    std::vector<int64_t> rows;
    int64_t channels, kernel;
    bool strided;
  } cases[] = {
      {"4B GDN conv, ragged rows", {5, 1, 40}, 8192, 4, false},
      {"4B GDN conv, strided, rows longer than a tile", {70, 17}, 8192, 4, true},
      {"kernel 3, odd channels", {2, 3, 9}, 37, 3, true},
      {"kernel 2, one row", {33}, 64, 2, false},
      {"kernel 8, rows shorter than the kernel", {3, 8, 1}, 130, 8, false},
  };
  uint32_t seed = 400;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    HostBatchLayout hl;  // training rows: each from position 0 (the K/V blocks are not read)
    int64_t T = 0;
    int32_t slot = 0, next_block = 0;
    for (int64_t n : c.rows) {
      std::vector<int32_t> blocks;
      for (int64_t b = 0; b < (n + 63) / 64; ++b) blocks.push_back(next_block++);
      hl.add_row(0, n, blocks, slot++);
      T += n;
    }
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    Pair x = rows_view(*be, T, c.channels, c.strided, seed++);
    Pair w(*be, random_tensor({c.channels, c.kernel}, seed++, 0.5f));
    Pair dout = rows_view(*be, T, c.channels, c.strided, seed++);
    Pair dx = rows_view(*be, T, c.channels, c.strided, seed++);
    expect_ok(ref->training().conv_backward({x.host, w.host, dout.host, dx.host, &cl}));
    const Status s = be->training().conv_backward({x.dev, w.dev, dout.dev, dx.dev, &dl});
    ASSERT_TRUE(s.ok()) << s.to_string();
    const double err = dx.error(*be);
    EXPECT_LE(err, kF32Tol);
    std::printf("conv_backward %-48s: rel err %.3g\n", c.name, err);
  }
}

// ---------------------------------------------------------------- optimizers

struct OptCase {
  const char* name;
  OptimizerKind kind;
  int64_t rows, cols;  // rows 0: a vector of cols
  bool nesterov;
};

TEST(CudaTrainingOps, OptimizersMatchCpuOverThreeSteps) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const OptCase cases[] = {
      {"muon r8 A [8, 2560]", OptimizerKind::kMuon, 8, 2560, true},
      {"muon r8 B [2560, 8]", OptimizerKind::kMuon, 2560, 8, true},
      {"muon r16 B [9216, 16]", OptimizerKind::kMuon, 9216, 16, false},
      {"muon r64 A [64, 2560]", OptimizerKind::kMuon, 64, 2560, true},
      {"muon r256 wide [256, 600]", OptimizerKind::kMuon, 256, 600, true},
      {"muon r256 tall [700, 256]", OptimizerKind::kMuon, 700, 256, false},
      {"muon square odd [37, 37]", OptimizerKind::kMuon, 37, 37, true},
      {"muon vector [2560]", OptimizerKind::kMuon, 0, 2560, true},
      {"muon column [5, 1]", OptimizerKind::kMuon, 5, 1, false},
      {"adam_w [16, 2560]", OptimizerKind::kAdamW, 16, 2560, false},
      {"adam_w [9216, 16]", OptimizerKind::kAdamW, 9216, 16, false},
      {"adam_w vector [7]", OptimizerKind::kAdamW, 0, 7, false},
      {"sgd [16, 2560]", OptimizerKind::kSgd, 16, 2560, false},
      {"sgd [3, 3]", OptimizerKind::kSgd, 3, 3, false},
  };
  uint32_t seed = 500;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const Shape shape = c.rows == 0 ? Shape{c.cols} : Shape{c.rows, c.cols};
    OptimizerHyper h;
    h.lr = c.kind == OptimizerKind::kAdamW ? 1e-3f : 0.02f;
    h.weight_decay = 0.1f;
    h.beta1 = 0.9f, h.beta2 = 0.999f, h.eps = 1e-8f;
    h.momentum = 0.95f, h.nesterov = c.nesterov, h.ns_steps = 5;
    // Small parameters, so that the comparison of param is a comparison of the updates.
    Pair p(*be, random_tensor(shape, seed++, 0.01f));
    const Tensor p0 = p.dev_result(*be);
    Pair m(*be, Tensor::empty(shape, DType::kF32)), v(*be, Tensor::empty(shape, DType::kF32));
    for (int64_t step = 1; step <= 3; ++step) {
      Pair g(*be, random_tensor(shape, seed++, 0.1f));
      OptimizerStepArgs ha{c.kind, p.host, g.host, m.host, v.host, h, step};
      OptimizerStepArgs da{c.kind, p.dev, g.dev, m.dev, v.dev, h, step};
      expect_ok(ref->optimizer().step(ha));
      const Status s = be->optimizer().step(da);
      ASSERT_TRUE(s.ok()) << s.to_string();
    }
    const Tensor got = p.dev_result(*be);
    const double err = rel_error(got, p.host_base);
    EXPECT_LE(err, kOptTol) << "param";
    Tensor du = Tensor::empty(shape, DType::kF32), dw = Tensor::empty(shape, DType::kF32);
    for (int64_t i = 0; i < du.numel(); ++i) {
      du.data<float>()[i] = got.data<float>()[i] - p0.data<float>()[i];
      dw.data<float>()[i] = p.host_base.data<float>()[i] - p0.data<float>()[i];
    }
    const double uerr = rel_error(du, dw);
    EXPECT_LE(uerr, kOptTol) << "the update";
    if (c.kind != OptimizerKind::kSgd) { EXPECT_LE(m.error(*be), kOptTol) << "m"; }
    if (c.kind == OptimizerKind::kAdamW) { EXPECT_LE(v.error(*be), kOptTol) << "v"; }
    std::printf("optimizer %-28s: param rel err %.3g, update rel err %.3g\n", c.name, err, uerr);
  }
}

// step_many runs Muon matrices of one shape as one group (one launch per kernel): each matrix's
// arithmetic is step()'s, so the parameters and momenta equal, bit for bit, those of the same
// steps taken one by one. The set mixes shapes, a vector (never grouped) and 70 matrices of one
// shape (more than a group holds), over two steps.
TEST(CudaTrainingOps, MuonStepManyEqualsStepsOneByOneBitForBit) {
  KILN_CUDA_OR_SKIP(be);
  std::vector<Shape> shapes = {{16, 2560}, {9216, 16}, {16, 2560}, {2560}, {9216, 16}, {16, 2560}};
  for (int i = 0; i < 70; ++i) shapes.push_back({4, 8});
  OptimizerHyper h;
  h.lr = 0.02f, h.weight_decay = 0.1f, h.momentum = 0.95f, h.nesterov = true, h.ns_steps = 5;
  struct Slot {
    Tensor p0, p1, m1, p2, m2;  // the start (host); step() one by one; step_many
  };
  std::vector<Slot> slots;
  uint32_t seed = 900;
  for (const Shape& sh : shapes) {
    const Tensor p0 = random_tensor(sh, seed++, 0.01f);
    const Tensor z = Tensor::empty(sh, DType::kF32);
    slots.push_back({p0, to_device(*be, p0), to_device(*be, z), to_device(*be, p0), to_device(*be, z)});
  }
  for (int64_t step = 1; step <= 2; ++step) {
    std::vector<OptimizerStepArgs> many;
    for (size_t i = 0; i < slots.size(); ++i) {
      const Tensor g = to_device(*be, random_tensor(shapes[i], seed++, 0.1f));
      expect_ok(be->optimizer().step({OptimizerKind::kMuon, slots[i].p1, g, slots[i].m1, Tensor(), h, step}));
      many.push_back({OptimizerKind::kMuon, slots[i].p2, g, slots[i].m2, Tensor(), h, step});
    }
    expect_ok(be->optimizer().step_many(many));
  }
  size_t differing = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const Tensor a = to_host(*be, slots[i].p1), b = to_host(*be, slots[i].p2);
    const Tensor ma = to_host(*be, slots[i].m1), mb = to_host(*be, slots[i].m2);
    const bool same = std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0 && std::memcmp(ma.raw(), mb.raw(), ma.nbytes()) == 0;
    EXPECT_TRUE(same) << "parameter " << i << " " << shapes[i].to_string();
    differing += same ? 0 : 1;
    // And the step moved it (a test of equality between two no-ops would prove nothing).
    EXPECT_NE(std::memcmp(b.raw(), slots[i].p0.raw(), b.nbytes()), 0) << "parameter " << i << " did not move";
  }
  std::printf("muon step_many: %zu of %zu parameters differ from step() one by one\n", differing, slots.size());
}

// The hyperparameter checks are the CPU's (one shared definition): the same message on both.
TEST(CudaTrainingOps, OptimizerRejectsBadHyperparametersAsTheCpuDoes) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  Pair p(*be, random_tensor({4, 8}, 1)), g(*be, random_tensor({4, 8}, 2));
  Pair m(*be, Tensor::empty({4, 8}, DType::kF32)), v(*be, Tensor::empty({4, 8}, DType::kF32));
  OptimizerHyper h;
  h.beta2 = 1.f;
  const Status hs = ref->optimizer().step({OptimizerKind::kAdamW, p.host, g.host, m.host, v.host, h, 1});
  const Status ds = be->optimizer().step({OptimizerKind::kAdamW, p.dev, g.dev, m.dev, v.dev, h, 1});
  ASSERT_FALSE(ds.ok());
  EXPECT_EQ(ds.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(ds.message(), hs.message());
  EXPECT_NE(ds.message().find("beta2"), std::string::npos) << ds.message();
}

// Clipping's scale: each optimizer over 2 steps with grad_scale 0.37, one by one and (Muon
// matrices of one shape) through step_many, against the CPU's steps with the same scale.
TEST(CudaTrainingOps, ScaledGradientStepsMatchCpu) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    OptimizerKind kind;
    Shape shape;
    bool many;
  };
  const Case cases[] = {{"muon [16, 2560]", OptimizerKind::kMuon, {16, 2560}, false},
                        {"muon [16, 2560] step_many", OptimizerKind::kMuon, {16, 2560}, true},
                        {"muon vector [2560]", OptimizerKind::kMuon, {2560}, false},
                        {"adam_w [9216, 16]", OptimizerKind::kAdamW, {9216, 16}, false},
                        {"sgd [16, 2560]", OptimizerKind::kSgd, {16, 2560}, false}};
  uint32_t seed = 1300;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    OptimizerHyper h;
    h.lr = c.kind == OptimizerKind::kAdamW ? 1e-3f : 0.02f;
    h.weight_decay = 0.1f;
    h.grad_scale = 0.37f;
    Pair p(*be, random_tensor(c.shape, seed++, 0.01f));
    Pair m(*be, Tensor::empty(c.shape, DType::kF32)), v(*be, Tensor::empty(c.shape, DType::kF32));
    for (int64_t step = 1; step <= 2; ++step) {
      Pair g(*be, random_tensor(c.shape, seed++, 0.1f));
      OptimizerStepArgs ha{c.kind, p.host, g.host, m.host, v.host, h, step};
      OptimizerStepArgs da{c.kind, p.dev, g.dev, m.dev, v.dev, h, step};
      expect_ok(ref->optimizer().step(ha));
      expect_ok(c.many ? be->optimizer().step_many({&da, 1}) : be->optimizer().step(da));
    }
    EXPECT_LE(p.error(*be), kOptTol) << "param";
    if (c.kind != OptimizerKind::kSgd) { EXPECT_LE(m.error(*be), kOptTol) << "m"; }
    if (c.kind == OptimizerKind::kAdamW) { EXPECT_LE(v.error(*be), kOptTol) << "v"; }
  }
}

// The global gradient norm's sum of squares on the device: 300 tensors (three launches of the
// kernel's groups of 128) from 1 to 9216 x 16 elements, against the CPU's double sum; the same
// bits on a second call (the partials are summed in a fixed order); a tensor the CPU refuses is
// refused with the CPU's message.
TEST(CudaTrainingOps, SumSquaresMatchesTheCpuAcrossLaunchGroups) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const Shape shapes[] = {{1}, {16, 2560}, {9216, 16}, {7, 3}, {2560}};
  std::vector<Tensor> host, dev;
  for (int i = 0; i < 300; ++i) {
    host.push_back(random_tensor(shapes[i % 5], 2000 + i, 0.5f));
    dev.push_back(to_device(*be, host.back()));
  }
  const double want = ref->optimizer().sum_squares(host).value();
  auto got = be->optimizer().sum_squares(dev);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_NEAR(*got, want, 1e-12 * want);
  EXPECT_EQ(be->optimizer().sum_squares(dev).value(), *got);
  std::printf("sum of squares of 300 tensors: cuda %.17g, cpu %.17g\n", *got, want);
  EXPECT_EQ(be->optimizer().sum_squares({}).value(), 0.0);
  const Tensor strided = dev[1].slice(1, 0, 8);
  const std::vector<Tensor> bad_dev = {dev[0], strided}, bad_host = {host[0], host[1].slice(1, 0, 8)};
  const auto d = be->optimizer().sum_squares(bad_dev);
  const auto h = ref->optimizer().sum_squares(bad_host);
  ASSERT_FALSE(d.ok());
  for (const auto* r : {&d, &h}) {
    EXPECT_NE(r->status().message().find("sum_squares: tensor 1"), std::string::npos) << r->status().to_string();
    EXPECT_NE(r->status().message().find("must be contiguous"), std::string::npos) << r->status().to_string();
  }
}

// ---------------------------------------------------------------- declines and bad arguments

TEST(CudaTrainingOps, MuonAboveRank256IsDeclinedSayingWhy) {
  KILN_CUDA_OR_SKIP(be);
  const Support s = be->optimizer().supports({OptimizerKind::kMuon, 300, 4096});
  EXPECT_FALSE(s.runs_natively());
  EXPECT_NE(s.constraint.find("300"), std::string::npos) << s.constraint;
  EXPECT_NE(s.constraint.find("256"), std::string::npos) << s.constraint;
  EXPECT_TRUE(be->optimizer().supports({OptimizerKind::kMuon, 256, 4096}).runs_natively());
  EXPECT_TRUE(be->optimizer().supports({OptimizerKind::kMuon, 4096, 256}).runs_natively());
  EXPECT_TRUE(be->optimizer().supports({OptimizerKind::kAdamW, 300, 4096}).runs_natively());

  Tensor p = be->storage().allocate({300, 512}, DType::kF32).value();
  Tensor g = be->storage().allocate({300, 512}, DType::kF32).value();
  Tensor m = be->storage().allocate({300, 512}, DType::kF32).value();
  const Status st = be->optimizer().step({OptimizerKind::kMuon, p, g, m, Tensor(), OptimizerHyper{}, 1});
  EXPECT_EQ(st.code(), ErrorCode::kUnsupported);
  EXPECT_NE(st.message().find("cuda declined optimizer muon [300, 512]"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("exceeds 256"), std::string::npos) << st.message();
  EXPECT_EQ(be->capabilities().training.muon_rank_max, 256);
  EXPECT_TRUE(be->capabilities().training.supported);
}

TEST(CudaTrainingOps, GemmOfAnIntegerBIsDeclinedSayingWhy) {
  KILN_CUDA_OR_SKIP(be);
  Tensor a = be->storage().allocate({4, 8}, DType::kF32).value();
  Tensor b = be->storage().allocate({8, 3}, DType::kI32).value();
  Tensor out = be->storage().allocate({4, 3}, DType::kF32).value();
  const Status s = be->training().gemm({a, b, out});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("b must be f32, bf16 or f16"), std::string::npos) << s.message();
}

// A host tensor handed to the CUDA facet is refused, naming the tensor, before any kernel runs.
TEST(CudaTrainingOps, HostTensorsAreRefusedNamingTheTensor) {
  KILN_CUDA_OR_SKIP(be);
  Tensor a = be->storage().allocate({4, 8}, DType::kF32).value();
  Tensor out = be->storage().allocate({4, 3}, DType::kF32).value();
  Tensor host_b = random_tensor({8, 3}, 1);
  Status s = be->training().gemm({a, host_b, out});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'b' is on"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not cuda"), std::string::npos) << s.message();

  Tensor x = be->storage().allocate({2, 16}, DType::kF32).value();
  Tensor w = be->storage().allocate({16}, DType::kF32).value();
  NormBackwardArgs n;
  n.x = x, n.weight = w, n.dx = x, n.dout = random_tensor({2, 16}, 2);
  s = be->training().norm_backward(n);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'dout' is on"), std::string::npos) << s.message();

  Tensor p = be->storage().allocate({4, 8}, DType::kF32).value();
  Tensor m = be->storage().allocate({4, 8}, DType::kF32).value();
  s = be->optimizer().step({OptimizerKind::kMuon, p, random_tensor({4, 8}, 3), m, Tensor(), OptimizerHyper{}, 1});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("tensor 'grad' is on"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("not cuda"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace kiln
