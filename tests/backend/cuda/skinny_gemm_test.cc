// The skinny tensor-core GEMM (kernels/skinny_gemm.cu: bf16 weights, 1..64 rows) through the
// linear facet, against the CPU facet's matmul on x rounded to bf16 first: the kernel rounds x to
// bf16 as it loads it (round to nearest even, as the host's rounding), so the products are the
// same and only the order of the f32 sums differs. Bound 1e-5 of max|y| (the GEMV's, for f32
// sums over k up to 9216); a wrong k permutation, a dropped step or a wrong tile gives errors of
// order 1. Cases: every 4B decode shape at 64 rows, m not a multiple of 8, a tail tile of weight
// rows, n below one tile, strided x and y, accumulation, x in f32 and in bf16, and the k split
// over 1, 2, 3 and 8 blocks of a cluster; each in both forms (wgmma, with x rows padded to 16, 32
// or 64, and mma.sync). The same call twice gives the same bits (the split's
// partial tiles are summed in a fixed order), and the skinny path never consults cuBLASLt's
// algorithm cache, which the same call with KILN_CUDA_SKINNY=0 does.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/tuning.h"

namespace kiln {
namespace {

using testing::converted;
using testing::random_tensor;
using testing::rel_error;
using testing::round_to;
using testing::to_device;
using testing::to_host;

constexpr double kSkinnyTol = 1e-5;

struct Case {
  int64_t m, n, k;
  DType x;
  bool accumulate, strided;
  int splits;  // tuning().skinny_splits: 0 by shape
};

uint64_t cache_lookups(Backend& be) {
  const CudaBackendStats s = cuda_backend_stats(be).value();
  return s.matmul_cache_hits + s.matmul_cache_misses;
}

TEST(SkinnyGemm, MatchesCpuOnXRoundedToBf16) {
  KILN_CUDA_OR_SKIP(be);
  auto cpu = std::move(create_backend("cpu").value());
  const cuda::Tuning saved = cuda::tuning();
  const Case cases[] = {
      {64, 8192, 2560, DType::kBF16, false, false, 0},  // in_proj_qkv / q_proj
      {64, 4096, 2560, DType::kBF16, false, false, 0},  // in_proj_z
      {64, 64, 2560, DType::kBF16, false, false, 0},    // in_proj_a and b together: below one tile
      {64, 1024, 2560, DType::kBF16, false, false, 0},  // k_proj / v_proj
      {64, 2560, 4096, DType::kF32, false, false, 0},   // out_proj / o_proj (x f32 at decode)
      {64, 9216, 2560, DType::kBF16, false, false, 0},  // gate / up
      {64, 2560, 9216, DType::kBF16, true, false, 0},   // down, accumulating into the residual
      {3, 8192, 2560, DType::kF32, false, false, 0},    {8, 2560, 9216, DType::kF32, true, true, 0},
      {9, 1000, 512, DType::kBF16, true, true, 0},      // a tail tile of 104 rows
      {33, 300, 384, DType::kF32, false, true, 0},      {50, 2560, 4096, DType::kBF16, false, false, 1},
      {50, 2560, 4096, DType::kBF16, false, false, 2},  {50, 2560, 4096, DType::kF32, true, false, 3},
      {17, 2560, 9216, DType::kBF16, false, true, 8},   {1, 777, 2560, DType::kF32, false, false, 0},
      {16, 8192, 2560, DType::kBF16, false, false, 0},  {32, 9216, 2560, DType::kBF16, false, false, 0},
      {12, 1000, 512, DType::kBF16, true, true, 0},      {20, 4096, 2560, DType::kBF16, true, true, 3},
  };
  uint32_t seed = 500;
  for (const auto& c : cases) {
    for (bool wgmma : {true, false}) {  // both forms
      SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " x=" << dtype_name(c.x)
                                      << (c.accumulate ? " acc" : "") << (c.strided ? " strided" : "")
                                      << " splits=" << c.splits << (wgmma ? " wgmma" : " mma.sync"));
      const int64_t xpad = c.strided ? 8 : 0, opad = c.strided ? 5 : 0;  // x rows stay 16-byte aligned
      Tensor xb = round_to(random_tensor({c.m, c.k + xpad}, seed++), DType::kBF16);  // exact in bf16
      Tensor w = random_tensor({c.n, c.k}, seed++, 1.f / std::sqrt(float(c.k)), DType::kBF16);
      const uint32_t y_seed = seed++;
      Tensor y0 = random_tensor({c.m, c.n + opad}, y_seed);
      Tensor want = random_tensor({c.m, c.n + opad}, y_seed);  // the same initial output
      ASSERT_TRUE(cpu->linear()
                      .matmul({xb.slice(1, 0, c.k), w, want.slice(1, 0, c.n), c.accumulate})
                      .ok());

      Tensor xd = to_device(*be, c.x == DType::kF32 ? xb : converted(xb, DType::kBF16));
      Tensor wd = to_device(*be, w);
      Tensor got[3];
      uint64_t lookups[3];
      for (int run = 0; run < 3; ++run) {  // skinny twice, then cuBLASLt
        cuda::tuning() = saved;
        cuda::tuning().skinny = run < 2;
        cuda::tuning().skinny_everywhere = true;  // every case, not only where it is the default
        cuda::tuning().gemv = false;  // m <= 8 reaches the skinny GEMM (or cuBLASLt) too
        cuda::tuning().skinny_splits = c.splits;
        cuda::tuning().skinny_wgmma = wgmma;
        Tensor yd = to_device(*be, y0);
        const uint64_t before = cache_lookups(*be);
        Status s = be->linear().matmul({xd.slice(1, 0, c.k), wd, yd.slice(1, 0, c.n), c.accumulate});
        ASSERT_TRUE(s.ok()) << s.to_string();
        got[run] = to_host(*be, yd);
        lookups[run] = cache_lookups(*be) - before;
      }
      cuda::tuning() = saved;
      const double err = rel_error(got[0], want);
      // Off sm_90 a tile is one block (no cluster splits k): the whole of k sums in one
      // accumulator chain, to 2e-5 where 9,216 products meet.
      const double tol = cuda::device_target().sm90_features ? kSkinnyTol : 2 * kSkinnyTol;
      EXPECT_LE(err, tol);
      EXPECT_LE(rel_error(got[2], want), kSkinnyTol);
      EXPECT_EQ(std::memcmp(got[0].raw(), got[1].raw(), got[0].nbytes()), 0) << "two runs differ";
      EXPECT_EQ(lookups[0], 0u) << "the skinny call went to cuBLASLt";
      EXPECT_GE(lookups[2], 1u) << "KILN_CUDA_SKINNY=0 did not reach cuBLASLt";
      std::printf("skinny m=%lld n=%lld k=%lld x=%s splits=%d %s: rel err %.3g (cublaslt %.3g)\n", (long long)c.m,
                  (long long)c.n, (long long)c.k, std::string(dtype_name(c.x)).c_str(), c.splits,
                  wgmma ? "wgmma" : "mma.sync", err, rel_error(got[2], want));
    }
  }
}

}  // namespace
}  // namespace kiln
