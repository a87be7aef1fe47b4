// The matmul against the CPU reference: every weight dtype on both paths (the GEMV up to 8 rows of
// x, the tiled matmul past them), n and k that fill no tile, strided x and out with accumulate,
// 16-bit weights read eight, two and one a load, and the decline named.
//
// Tolerance: max|got - want| / max|want| < 1e-5 for every weight dtype. Both sides widen 16-bit
// weights to f32 exactly and accumulate in f32, so they differ only in the order of the sums
// (rounding of order k^0.5 * 2^-24 relative to the output's scale: 1e-7 to 1.5e-6 here, the same
// with OpenBLAS's Haswell, Zen, SkylakeX or Sandybridge kernels on one or two threads). Where the
// device multiplies 16-bit weights on cooperative matrices (past 8 rows), x is rounded to f16:
// 2e-3 there (measured about 2e-4 on an H100).
#include <gtest/gtest.h>

#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::rel_error;
using testing::to_device;
using testing::to_host;

constexpr double kTolerance = 1e-5;

// The tolerance of a product of m rows on weights of dtype w.
double tolerance(Backend& be, int64_t m, DType w) {
  return w != DType::kF32 && m > 8 && testing::cooperative_matmul(be) ? testing::kCoopTolerance : kTolerance;
}

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

struct Case {
  int64_t m, n, k;
  DType w;
  bool strided = false;     // x a column slice of a wider tensor, out of another
  bool accumulate = false;  // out += x w^T onto random values
};

std::string name(const Case& c) {
  return "m=" + std::to_string(c.m) + " n=" + std::to_string(c.n) + " k=" + std::to_string(c.k) + " w=" +
         std::string(dtype_name(c.w)) + (c.strided ? " strided" : "") + (c.accumulate ? " accumulate" : "");
}

// Runs the case on both backends; x and out are views at column 5 of tensors 11 columns wider
// where strided. Compares the whole of out's base tensor: the columns around the view must keep
// their values exactly.
void expect_equal_to_cpu(Backend& be, Backend& ref, const Case& c, uint32_t seed) {
  const int64_t pad = c.strided ? 11 : 0, at = c.strided ? 5 : 0;
  Tensor x_base = random_tensor({c.m, c.k + pad}, seed, 1.f);
  Tensor w = random_tensor({c.n, c.k}, seed + 1, 0.5f, c.w);
  Tensor out_base = random_tensor({c.m, c.n + pad}, seed + 2, 3.f);
  Tensor dx_base = to_device(be, x_base), dw = to_device(be, w), dout_base = to_device(be, out_base);

  auto x = [&](const Tensor& t) { return t.slice(1, at, at + c.k); };
  auto out = [&](const Tensor& t) { return t.slice(1, at, at + c.n); };
  Status want = ref.linear().matmul({x(x_base), w, out(out_base), c.accumulate});
  ASSERT_TRUE(want.ok()) << name(c) << ": " << want.to_string();
  Status got = be.linear().matmul({x(dx_base), dw, out(dout_base), c.accumulate});
  ASSERT_TRUE(got.ok()) << name(c) << ": " << got.to_string();

  Tensor result = to_host(be, dout_base);
  EXPECT_LT(rel_error(result, out_base), tolerance(be, c.m, c.w)) << name(c);
  for (int64_t i = 0; i < c.m; ++i) {
    for (int64_t j = 0; j < c.n + pad; ++j) {
      if (j >= at && j < at + c.n) continue;
      ASSERT_EQ(result.data<float>()[i * (c.n + pad) + j], out_base.data<float>()[i * (c.n + pad) + j])
          << name(c) << ": column " << j << " outside out, row " << i;
    }
  }
}

TEST(VulkanLinear, EveryWeightDtypeOnBothPathsEqualsCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 1;
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t m : {1, 3, 8, 9, 37, 130}) expect_equal_to_cpu(*be, *ref, {m, 67, 129, w}, seed += 3);
}

TEST(VulkanLinear, StridedRowsAndAccumulateEqualCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 100;
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t m : {1, 8, 37})
      for (bool accumulate : {false, true})
        expect_equal_to_cpu(*be, *ref, {m, 67, 129, w, true, accumulate}, seed += 3);
}

// Even k: 16-bit weights go two a load; a longer k runs many k steps of the tiled matmul.
TEST(VulkanLinear, EvenAndLongKEqualCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 200;
  for (DType w : {DType::kF32, DType::kBF16, DType::kF16})
    for (int64_t m : {2, 70}) expect_equal_to_cpu(*be, *ref, {m, 130, 1024, w, true, true}, seed += 3);
}

// k a multiple of 8 and rows of x and w 16 bytes aligned: 16-bit weights go eight a load, the
// partial sums across subgroups (on devices with subgroup arithmetic, lavapipe among them).
TEST(VulkanLinear, SixteenByteRowsEqualCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 300;
  for (DType w : {DType::kBF16, DType::kF16})
    for (int64_t m : {1, 4, 8})
      for (bool accumulate : {false, true}) expect_equal_to_cpu(*be, *ref, {m, 130, 1032, w, false, accumulate}, seed += 3);
}

// A 16-bit weight starting two bytes past a 4-byte boundary, k even: read one weight a load.
TEST(VulkanLinear, MisalignedSixteenBitWeightsEqualCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  const int64_t m = 5, n = 33, k = 96;
  for (DType d : {DType::kBF16, DType::kF16}) {
    Tensor flat = random_tensor({n * k + 1}, 7, 0.5f, d);
    Tensor w = flat.as_strided({n, k}, {k, 1}, 1);
    Tensor x = random_tensor({m, k}, 8);
    Tensor want = Tensor::empty({m, n}, DType::kF32);
    ASSERT_TRUE(ref->linear().matmul({x, w, want}).ok());
    Tensor dw = to_device(*be, flat).as_strided({n, k}, {k, 1}, 1);
    ASSERT_NE(reinterpret_cast<uintptr_t>(dw.raw()) % 4, 0u);
    Tensor out = be->storage().allocate({m, n}, DType::kF32).value();
    Status s = be->linear().matmul({to_device(*be, x), dw, out});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LT(rel_error(to_host(*be, out), want), kTolerance) << dtype_name(d);
  }
}

// A group's products share one barrier: each output equals its own matmul's, split over k too
// (the partial sums' reduction inside the group), with accumulate.
TEST(VulkanLinear, GroupOfProductsEqualsEachAlone) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  for (int64_t m : {1, 37}) {
    const int64_t k = 264;
    const std::vector<int64_t> ns = {40, 130, 8};
    Tensor x = random_tensor({m, k}, 400 + static_cast<uint32_t>(m));
    MatmulGroupArgs want{x, {}, {}, true}, got{to_device(*be, x), {}, {}, true};
    for (size_t i = 0; i < ns.size(); ++i) {
      Tensor w = random_tensor({ns[i], k}, 410 + static_cast<uint32_t>(i), 0.5f, DType::kBF16);
      Tensor out = random_tensor({m, ns[i]}, 420 + static_cast<uint32_t>(i));
      want.w.push_back(w), want.out.push_back(out);
      got.w.push_back(to_device(*be, w)), got.out.push_back(to_device(*be, out));
    }
    ASSERT_TRUE(ref->linear().matmul_group(want).ok());
    Status s = be->linear().matmul_group(got);
    ASSERT_TRUE(s.ok()) << s.to_string();
    for (size_t i = 0; i < ns.size(); ++i)
      EXPECT_LT(rel_error(to_host(*be, got.out[i]), want.out[i]), tolerance(*be, m, DType::kBF16))
          << "m=" << m << " output " << i;
  }
}

TEST(VulkanLinear, SixteenBitXIsDeclinedNamingTheRequest) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor x = to_device(*be, random_tensor({3, 16}, 1, 1.f, DType::kBF16));
  Tensor w = to_device(*be, random_tensor({4, 16}, 2, 1.f, DType::kBF16));
  Tensor out = be->storage().allocate({3, 4}, DType::kF32).value();
  Status s = be->linear().matmul({x, w, out});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("vulkan"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("matmul m=3 n=4 k=16 x=bf16"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln
