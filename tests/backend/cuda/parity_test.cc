// Each CUDA facet against the CPU reference backend on the same random inputs: tables of cases
// over the 4B shapes and tiny ones (GQA, head_dim 256, dk != dv), decode and prefill, several rows
// with non-contiguous K/V blocks, and the strided views the model passes. Tolerances, as
// max|cuda - cpu| / max|cpu|: 1e-2 for cuBLASLt GEMMs on bf16/f16 weights (x is rounded to the
// weight dtype), 1e-5 for the GEMV kernel (f32 x, f32 accumulation), 2e-5 for everything else
// computed in f32, 1e-4 where the chunked GDN form is compared with the recurrent one. Each kernel
// variant (GEMV / cuBLASLt, chunked / recurrent GDN, fused / separate GDN decode, token-parallel /
// sequential conv, split / simple attention) is checked, switched through cuda::tuning().
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernel_timing.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/tuning.h"
#include "backend/sample_parity.h"

namespace kiln {
namespace {

using Pair = testing::DevicePair;
using testing::host_i32;
using testing::random_tensor;
using testing::rel_error;
using testing::converted;
using testing::round_to;
using testing::widened;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 2e-5;
constexpr double kHalfTol = 1e-2;
constexpr double kGemvTol = 1e-5;
constexpr double kChunkedTol = 1e-4;
// The two-pass GDN with its products in one tf32 pass (operands rounded to 2^-11 relative): an
// order above tf32's rounding, an order below the bf16 operands' it stands in for (kHalfTol).
constexpr double kTf32ProductsTol = 2e-3;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

// Sets the kernel switches for the scope of a test, restoring them after.
class TuningScope {
 public:
  TuningScope() : saved_(cuda::tuning()) {}
  ~TuningScope() { cuda::tuning() = saved_; }
  cuda::Tuning& operator*() { return cuda::tuning(); }
  cuda::Tuning* operator->() { return &cuda::tuning(); }

 private:
  cuda::Tuning saved_;
};

// ---------------------------------------------------------------- matmul

struct MatmulCase {
  int64_t m, n, k;
  DType w;
  bool accumulate, strided;
};

TEST(CudaParity, Matmul) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const MatmulCase cases[] = {
      {1, 4096, 2560, DType::kBF16, false, false},  // 4B decode-shaped
      {1, 2560, 9216, DType::kBF16, true, false},   // down_proj, accumulate
      {7, 1000, 512, DType::kF16, true, false},     {64, 2560, 1024, DType::kBF16, true, true},
      {33, 300, 64, DType::kF32, false, false},     {5, 17, 129, DType::kF32, true, true},
      {200, 256, 256, DType::kBF16, false, true},   {130, 96, 2560, DType::kF32, true, false},
      {4096, 16, 2560, DType::kF32, false, false},  // LoRA's u = x A^T on a 4096-token segment
      {700, 64, 1024, DType::kF32, true, true},
  };
  uint32_t seed = 1;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " w=" << dtype_name(c.w)
                                    << (c.accumulate ? " acc" : "") << (c.strided ? " strided" : ""));
    const int64_t xpad = c.strided ? 3 : 0, opad = c.strided ? 5 : 0;
    Pair xb(*be, random_tensor({c.m, c.k + xpad}, seed++));
    Pair x = xb.view(xb.host_base.slice(1, xpad, xpad + c.k));
    Pair w(*be, random_tensor({c.n, c.k}, seed++, 1.f / std::sqrt(float(c.k)), c.w));
    Pair ob(*be, random_tensor({c.m, c.n + opad}, seed++));
    Pair o = ob.view(ob.host_base.slice(1, 0, c.n));
    MatmulArgs ha{x.host, w.host, o.host, c.accumulate}, da{x.dev, w.dev, o.dev, c.accumulate};
    ASSERT_TRUE(ref->linear().matmul(ha).ok());
    Status s = be->linear().matmul(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    double err = rel_error(ob.dev_result(*be), ob.host_base);
    EXPECT_LE(err, c.w == DType::kF32 ? kF32Tol : kHalfTol);
    std::printf("matmul m=%lld n=%lld k=%lld %s: rel err %.3g\n", (long long)c.m, (long long)c.n, (long long)c.k,
                std::string(dtype_name(c.w)).c_str(), err);
  }
}

// (m = 16 with the skinny GEMM off: the GEMM goes through cuBLASLt and its cache.)
TEST(CudaParity, MatmulAlgorithmCacheHitsOnRepeat) {
  KILN_CUDA_OR_SKIP(be);
  TuningScope tune;
  tune->skinny = false;
  Tensor x = to_device(*be, random_tensor({16, 64}, 1));
  Tensor w = to_device(*be, random_tensor({32, 64}, 2, 0.1f, DType::kBF16));
  Tensor y = be->storage().allocate({16, 32}, DType::kF32).value();
  ASSERT_TRUE(be->linear().matmul({x, w, y}).ok());
  CudaBackendStats s0 = cuda_backend_stats(*be).value();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(be->linear().matmul({x, w, y}).ok());
  CudaBackendStats s1 = cuda_backend_stats(*be).value();
  EXPECT_EQ(s1.matmul_cache_misses, s0.matmul_cache_misses);
  EXPECT_EQ(s1.matmul_cache_hits, s0.matmul_cache_hits + 3);
  EXPECT_GE(s1.matmul_cache_entries, 1u);
}

// A decode-sized cuBLASLt GEMM (m = 48) has its algorithm timed on first use: the timing writes
// a scratch output, so an accumulating call still adds exactly once; a second backend of the
// process reuses the choice (no new timing) and so computes the same bits.
TEST(CudaParity, TimedGemmAlgorithmLeavesOutputToTheCallAndIsSharedByTheProcess) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  TuningScope tune;
  tune->skinny = false;  // 48 rows: cuBLASLt's path
  tune->gemm_autotune = true;
  tune->gemm_autotune_max_m = 256;
  const int64_t m = 48, n = 3000, k = 2560;  // a shape no other test uses
  Pair x(*be, random_tensor({m, k}, 91));
  Pair w(*be, random_tensor({n, k}, 92, 1.f / std::sqrt(float(k)), DType::kBF16));
  Pair o(*be, random_tensor({m, n}, 93));
  const uint64_t timed0 = cuda_backend_stats(*be)->matmul_plans_timed;
  ASSERT_TRUE(ref->linear().matmul({x.host, w.host, o.host, true}).ok());
  Status s = be->linear().matmul({x.dev, w.dev, o.dev, true});
  ASSERT_TRUE(s.ok()) << s.to_string();
  EXPECT_EQ(cuda_backend_stats(*be)->matmul_plans_timed, timed0 + 1);
  EXPECT_LE(rel_error(o.dev_result(*be), o.host), kHalfTol);

  auto other = make_cuda_backend().value();
  const Tensor x2 = to_device(*other, x.host), w2 = to_device(*other, w.host);
  Tensor o2 = to_device(*other, random_tensor({m, n}, 93));
  ASSERT_TRUE(other->linear().matmul({x2, w2, o2, true}).ok());
  EXPECT_EQ(cuda_backend_stats(*other)->matmul_plans_timed, 0u);
  EXPECT_EQ(rel_error(to_host(*other, o2), o.dev_result(*be)), 0.0);
}

// The GEMV kernel (m <= 8, 16-bit weights) reads f32 x: it matches the CPU (which does not round
// x either) to f32 rounding, where cuBLASLt on the same call is off by the bf16 rounding of x.
TEST(CudaParity, GemvMatchesCpuToF32Rounding) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  TuningScope tune;
  struct Case {
    int64_t m, n, k;
    DType w;
    bool accumulate, strided;
  } cases[] = {
      // A warp per 1, 2 or 4 rows (m <= 2, n >= 4096), tails included.
      {1, 8192, 2560, DType::kBF16, false, false},  // in_proj_qkv / q_proj
      {1, 9000, 512, DType::kBF16, true, false},    {2, 4100, 512, DType::kF16, false, true},
      // A block per 4 rows.
      {1, 32, 2560, DType::kBF16, false, false},    // in_proj_a
      {1, 2560, 9216, DType::kBF16, true, false},   // down_proj, accumulate
      {2, 1027, 512, DType::kF16, false, true},     // a tail block of 3 rows
      {3, 64, 2560, DType::kBF16, true, true},      {4, 4096, 2560, DType::kBF16, false, false},
      {5, 9, 8, DType::kF16, true, false},          {8, 1000, 4096, DType::kBF16, true, true},
  };
  tune->gemm_autotune = false;  // the GEMV by the H200's crossovers on every case, not by timing
  uint32_t seed = 40;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << c.m << " n=" << c.n << " k=" << c.k << " w=" << dtype_name(c.w));
    const int64_t xpad = c.strided ? 4 : 0, opad = c.strided ? 5 : 0;  // x rows stay 16-byte aligned
    Pair xb(*be, random_tensor({c.m, c.k + xpad}, seed++));
    Pair x = xb.view(xb.host_base.slice(1, 0, c.k));
    Pair w(*be, random_tensor({c.n, c.k}, seed++, 1.f / std::sqrt(float(c.k)), c.w));
    const uint32_t o_seed = seed++;
    double err[2];
    for (int gemv = 0; gemv < 2; ++gemv) {
      tune->gemv = gemv == 1;
      Pair ob(*be, random_tensor({c.m, c.n + opad}, o_seed));  // the same initial output both times
      Pair o = ob.view(ob.host_base.slice(1, 0, c.n));
      MatmulArgs ha{x.host, w.host, o.host, c.accumulate}, da{x.dev, w.dev, o.dev, c.accumulate};
      ASSERT_TRUE(ref->linear().matmul(ha).ok());
      Status s = be->linear().matmul(da);
      ASSERT_TRUE(s.ok()) << s.to_string();
      err[gemv] = rel_error(ob.dev_result(*be), ob.host_base);
    }
    EXPECT_LE(err[1], kGemvTol);
    EXPECT_LE(err[0], kHalfTol);
    std::printf("gemv m=%lld n=%lld k=%lld %s: rel err %.3g (cublaslt, x rounded: %.3g)\n", (long long)c.m,
                (long long)c.n, (long long)c.k, std::string(dtype_name(c.w)).c_str(), err[1], err[0]);
  }
}

// Projections sharing x in one GEMV launch (m <= 2): every output equals the CPU's matmul to
// f32 rounding, accumulate and strided outputs included; the group is one launch, and a group
// the kernel does not take (m = 3, an f32 weight) runs call by call with the same results.
TEST(CudaParity, MatmulGroupMatchesCpuAndIsOneLaunch) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t m;
    std::vector<int64_t> n;
    int64_t k;
    DType w;
    bool accumulate;
    uint64_t launches;  // of the group on the device
  } cases[] = {
      {1, {8192, 4096, 32, 32}, 2560, DType::kBF16, false, 1},  // GDN in_proj qkv, z, a, b
      {2, {8192, 1024, 1024}, 2560, DType::kBF16, true, 1},     // attention q, k, v
      {1, {9216, 9216}, 2560, DType::kF16, false, 1},           // gate, up
      {1, {5, 3}, 16, DType::kBF16, true, 1},                   // tiny segments, accumulate
      {3, {64, 100}, 256, DType::kBF16, false, 2},              // m = 3: call by call
      {1, {64, 100}, 256, DType::kF32, false, 2},               // f32: cuBLASLt, call by call
  };
  uint32_t seed = 70;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << c.m << " segments=" << c.n.size() << " k=" << c.k);
    Pair x(*be, random_tensor({c.m, c.k}, seed++));
    std::vector<Pair> w, ob;
    MatmulGroupArgs ha, da;
    ha.x = x.host, da.x = x.dev, ha.accumulate = da.accumulate = c.accumulate;
    for (size_t i = 0; i < c.n.size(); ++i) {
      w.emplace_back(*be, random_tensor({c.n[i], c.k}, seed++, 1.f / std::sqrt(float(c.k)), c.w));
      ob.emplace_back(*be, random_tensor({c.m, c.n[i] + 3}, seed++));  // strided rows
    }
    for (size_t i = 0; i < c.n.size(); ++i) {
      Pair o = ob[i].view(ob[i].host_base.slice(1, 0, c.n[i]));
      ha.w.push_back(w[i].host), da.w.push_back(w[i].dev);
      ha.out.push_back(o.host), da.out.push_back(o.dev);
    }
    ASSERT_TRUE(ref->linear().matmul_group(ha).ok());
    const uint64_t before = cuda_backend_stats(*be)->launches;
    Status s = be->linear().matmul_group(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const uint64_t launches = cuda_backend_stats(*be)->launches - before;
    if (c.launches == 1) EXPECT_EQ(launches, 1u);
    else EXPECT_GE(launches, 2u);
    for (size_t i = 0; i < c.n.size(); ++i)
      EXPECT_LE(rel_error(ob[i].dev_result(*be), ob[i].host_base), c.w == DType::kF32 ? kF32Tol : kGemvTol)
          << "segment " << i;
  }
  MatmulGroupArgs bad;
  bad.x = to_device(*be, random_tensor({1, 16}, 1));
  bad.w = {to_device(*be, random_tensor({4, 16}, 2, 0.1f, DType::kBF16))};
  EXPECT_EQ(be->linear().matmul_group(bad).code(), ErrorCode::kInvalidArgument);  // a weight without an output
}

// A group on cuBLASLt (64 rows, 16-bit weights) rounds x once for all its projections: 1 + N
// launches instead of 2N, and each output is bit-equal to that projection's own matmul (the same
// rounded x and algorithm), accumulate included; an f32 weight keeps the call-by-call path.
TEST(CudaParity, MatmulGroupOnCublasLtRoundsXOnce) {
  KILN_CUDA_OR_SKIP(be);
  TuningScope tune;
  tune->skinny = false;  // 64 rows would take the skinny GEMM, which rounds x as it loads
  struct Case {
    int64_t m;
    std::vector<int64_t> n;
    DType w;
    bool accumulate;
  } cases[] = {
      {64, {4096, 1024, 1024}, DType::kBF16, false},  // attention q, k, v at 64 decode rows
      {64, {8192, 4096, 32, 32}, DType::kBF16, true},  // GDN in_proj, accumulate
      {300, {9216, 9216}, DType::kF16, false},         // gate, up over a prefill chunk
  };
  const int64_t k = 2560;
  uint32_t seed = 170;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "m=" << c.m << " projections=" << c.n.size());
    const Tensor x = to_device(*be, random_tensor({c.m, k}, seed++));
    MatmulGroupArgs g;
    g.x = x;
    g.accumulate = c.accumulate;
    std::vector<Tensor> start, single;
    for (int64_t n : c.n) {
      g.w.push_back(to_device(*be, random_tensor({n, k}, seed++, 1.f / std::sqrt(float(k)), c.w)));
      start.push_back(random_tensor({c.m, n}, seed++));
      g.out.push_back(to_device(*be, start.back()));
      single.push_back(to_device(*be, start.back()));
    }
    const uint64_t before = cuda_backend_stats(*be)->launches;
    Status s = be->linear().matmul_group(g);
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(cuda_backend_stats(*be)->launches - before, 1 + c.n.size());
    for (size_t i = 0; i < c.n.size(); ++i) {
      ASSERT_TRUE(be->linear().matmul({x, g.w[i], single[i], c.accumulate}).ok());
      EXPECT_EQ(rel_error(to_host(*be, g.out[i]), to_host(*be, single[i])), 0.0) << "projection " << i;
    }
  }
  MatmulGroupArgs f32;  // f32 weights: plain cuBLASLt calls, one each
  f32.x = to_device(*be, random_tensor({64, 256}, 1));
  for (int i = 0; i < 2; ++i) {
    f32.w.push_back(to_device(*be, random_tensor({128, 256}, 2 + i, 0.1f)));
    f32.out.push_back(to_device(*be, random_tensor({64, 128}, 4 + i)));
  }
  const uint64_t before = cuda_backend_stats(*be)->launches;
  ASSERT_TRUE(be->linear().matmul_group(f32).ok());
  EXPECT_EQ(cuda_backend_stats(*be)->launches - before, 2u);
}

// ---------------------------------------------------------------- norm

TEST(CudaParity, RmsNorm) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t rows, width, row_stride;
  } cases[] = {{5, 64, 64},     {3, 2560, 2560}, {7 * 16, 256, 512}, {9, 128, 130}, {1, 2560, 2560},
               // more than 64 rows narrower than 256 columns: a warp a row (a partial last block)
               {203, 128, 128}, {75, 100, 103}};
  uint32_t seed = 100;
  for (const auto& c : cases)
    for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated})
      for (bool fused : {false, true})
        for (bool in_place : {false, true}) {
          if (kind == NormKind::kGated && fused) continue;
          SCOPED_TRACE(::testing::Message() << "rows=" << c.rows << " width=" << c.width << " kind=" << int(kind)
                                          << " fused=" << fused << " in_place=" << in_place);
          Pair xb(*be, random_tensor({c.rows, c.row_stride}, seed++, 2.f));
          Pair x = xb.view(xb.host_base.slice(1, 0, c.width));
          Pair w(*be, random_tensor({c.width}, seed++, 0.3f));
          Pair z(*be, random_tensor({c.rows, c.width}, seed++));
          Pair res(*be, random_tensor({c.rows, c.width}, seed++));
          Pair ob(*be, random_tensor({c.rows, c.width}, seed++));
          Pair o = in_place ? x : ob;
          NormArgs ha{kind, x.host, fused ? res.host : Tensor(), w.host, kind == NormKind::kGated ? z.host : Tensor(),
                      o.host, 1e-6f};
          NormArgs da{kind, x.dev, fused ? res.dev : Tensor(), w.dev, kind == NormKind::kGated ? z.dev : Tensor(),
                      o.dev, 1e-6f};
          ASSERT_TRUE(ref->norm().rms_norm(ha).ok());
          Status s = be->norm().rms_norm(da);
          ASSERT_TRUE(s.ok()) << s.to_string();
          const Pair& out = in_place ? xb : ob;
          EXPECT_LE(rel_error(out.dev_result(*be), out.host_base), kF32Tol);
          if (fused) {
            EXPECT_LE(rel_error(res.dev_result(*be), res.host_base), kF32Tol);
          }
        }
}

// ---------------------------------------------------------------- rope

TEST(CudaParity, Rope) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t tokens, hq, hkv, d, rot;
    float theta;
    bool gated_layout;  // q heads 2*d apart, as in the model's q_proj output
  } cases[] = {{7, 16, 4, 256, 64, 1e7f, true}, {65, 2, 1, 32, 8, 1e4f, true}, {3, 4, 4, 64, 64, 1e4f, false}};
  uint32_t seed = 200;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.tokens << " hq=" << c.hq << " d=" << c.d);
    const int64_t per_head = c.gated_layout ? 2 * c.d : c.d;
    Pair qb(*be, random_tensor({c.tokens, c.hq * per_head}, seed++));
    Pair q = qb.view(qb.host_base.as_strided({c.tokens, c.hq, c.d}, {c.hq * per_head, per_head, 1}));
    Pair kb(*be, random_tensor({c.tokens, c.hkv * c.d}, seed++));
    Pair k = kb.view(kb.host_base.as_strided({c.tokens, c.hkv, c.d}, {c.hkv * c.d, c.d, 1}));
    std::vector<int32_t> pos(c.tokens);
    std::mt19937 rng(seed++);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % 40000);
    Pair positions(*be, host_i32(pos));
    ASSERT_TRUE(ref->attention().rope({q.host, k.host, positions.host, c.rot, c.theta}).ok());
    Status s = be->attention().rope({q.dev, k.dev, positions.dev, c.rot, c.theta});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(rel_error(qb.dev_result(*be), qb.host_base), kF32Tol);
    EXPECT_LE(rel_error(kb.dev_result(*be), kb.host_base), kF32Tol);
  }
}

// ---------------------------------------------------------------- layouts

// Rows continuing from `past` tokens with `n` new ones; K/V blocks drawn from a shuffled pool so
// that no row's blocks are contiguous.
struct Rows {
  std::vector<int64_t> past, n;
};

HostBatchLayout make_layout(const Rows& r, int64_t total_blocks, uint32_t seed, int64_t block_size = 64) {
  std::vector<int32_t> pool(total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  HostBatchLayout h;
  h.block_size = block_size;
  size_t next = 0;
  for (size_t i = 0; i < r.past.size(); ++i) {
    const int64_t need = (r.past[i] + r.n[i] + block_size - 1) / block_size;
    std::vector<int32_t> blocks(pool.begin() + next, pool.begin() + next + need);
    next += need;
    h.add_row(r.past[i], r.n[i], blocks, static_cast<int32_t>(r.past.size() - 1 - i));  // slots reversed
  }
  return h;
}

int64_t total_tokens(const Rows& r) { return std::accumulate(r.n.begin(), r.n.end(), int64_t{0}); }

// ---------------------------------------------------------------- attention

int64_t blocks_needed(const Rows& r, int64_t block_size = 64) {
  int64_t b = 0;
  for (size_t i = 0; i < r.past.size(); ++i) b += (r.past[i] + r.n[i] + block_size - 1) / block_size;
  return b;
}

// Every attention kernel (split-keys for decode, with lanes over keys or over dims;
// query-per-warp for prefill; the simple kernel) against the CPU, including decodes long enough
// to be split over many blocks and rows whose histories differ so that some splits of a row are
// empty; over an f32 cache, a bf16 one and an e4m3 one (the CPU then attends over the same values
// in f32: the host cache rounded as the device rounds what it writes, which the test checks
// element for element, so f32_to_e4m3 is held to the hardware's conversion); blocks of 64 tokens
// (the engine's), and of 48 (a block size that is not a power of two takes the division in
// PagedKeys::slot instead of the shift).
TEST(CudaParity, KvWriteAndPagedAttention) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  TuningScope tune;
  struct Case {
    const char* name;
    Rows rows;
    int64_t hq, hkv, d;
    bool gate;
    int64_t block = 64;
  } cases[] = {
      {"decode 4B", {{0, 70, 130}, {1, 1, 1}}, 16, 4, 256, true},
      {"decode 4B long", {{3000, 9, 700}, {1, 1, 1}}, 16, 4, 256, true},
      {"decode group 8 d128", {{1500}, {1}}, 16, 2, 128, false},
      {"decode 9 rows d64", {{0, 5, 63, 64, 65, 127, 200, 1, 33}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}, 8, 4, 64, true},
      {"decode d32", {{40, 0}, {1, 1}}, 2, 1, 32, false},
      {"prefill 4B", {{0, 65}, {100, 30}}, 16, 4, 256, true},
      {"prefill tiny", {{0}, {200}}, 2, 1, 32, true},
      {"mixed mha", {{5, 0, 64}, {1, 64, 3}}, 4, 4, 64, false},
      {"head_dim 96 (simple kernel only)", {{10, 0}, {1, 5}}, 4, 2, 96, true},
      {"decode 4B, blocks of 48", {{0, 70, 1300}, {1, 1, 1}}, 16, 4, 256, true, 48},
      {"prefill 4B, blocks of 48", {{0, 50}, {100, 30}}, 16, 4, 256, true, 48},
  };
  uint32_t seed = 300;
  for (const auto& c : cases)
    for (DType kv : {DType::kF32, DType::kBF16, DType::kF8E4M3})
      for (const std::string form : {"split, lanes over keys", "split, lanes over dims", "simple"}) {
        SCOPED_TRACE(::testing::Message() << c.name << " (" << form << ") kv " << dtype_name(kv));
        tune->attention_split = form != "simple";
        tune->attention_key_groups = form == "split, lanes over keys" ? 1 : 0;
        const bool narrow = kv != DType::kF32;
        const int64_t T = total_tokens(c.rows), blocks = blocks_needed(c.rows, c.block) + 3;
        HostBatchLayout hl = make_layout(c.rows, blocks, seed++, c.block);
        BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
        BatchLayout dl = make_batch_layout(hl, be->storage()).value();
        // Random history everywhere (values of the cache's dtype for a bf16 or e4m3 cache); the
        // new tokens are then written over their slots.
        auto cache = [&] {
          Tensor h = random_tensor({blocks, c.block, c.hkv, c.d}, seed++);
          if (!narrow) return Pair(*be, h);
          Pair p(*be, round_to(h, kv));
          p.dev_base = p.dev = to_device(*be, converted(h, kv));
          return p;
        };
        Pair kc = cache(), vc = cache();
        Pair kb(*be, random_tensor({T, c.hkv * c.d}, seed++));
        Pair vb(*be, random_tensor({T, c.hkv * c.d}, seed++));
        Pair k = kb.view(kb.host_base.reshape({T, c.hkv, c.d}));
        Pair v = vb.view(vb.host_base.reshape({T, c.hkv, c.d}));
        ASSERT_TRUE(ref->attention().write_kv({k.host, v.host, kc.host, vc.host, cl.slot_mapping}).ok());
        Status s = be->attention().write_kv({k.dev, v.dev, kc.dev, vc.dev, dl.slot_mapping});
        ASSERT_TRUE(s.ok()) << s.to_string();
        if (narrow) {  // the device rounds what it writes to the nearest value of the cache's dtype
          round_to(kc.host_base, kv);
          round_to(vc.host_base, kv);
        }
        auto dev_cache = [&](const Pair& p) { return narrow ? widened(p.dev_result(*be)) : p.dev_result(*be); };
        EXPECT_EQ(rel_error(dev_cache(kc), kc.host_base), 0.0);
        EXPECT_EQ(rel_error(dev_cache(vc), vc.host_base), 0.0);

        // q and gate interleaved per head, as the model's q_proj output.
        Pair qg(*be, random_tensor({T, c.hq * 2 * c.d}, seed++));
        Pair q = qg.view(qg.host_base.as_strided({T, c.hq, c.d}, {c.hq * 2 * c.d, 2 * c.d, 1}));
        Pair g = qg.view(qg.host_base.as_strided({T, c.hq, c.d}, {c.hq * 2 * c.d, 2 * c.d, 1}, c.d));
        Pair out(*be, random_tensor({T, c.hq, c.d}, seed++));
        const float scale = 1.f / std::sqrt(float(c.d));
        AttentionArgs ha{q.host, c.gate ? g.host : Tensor(), out.host, kc.host, vc.host, &cl, scale};
        AttentionArgs da{q.dev, c.gate ? g.dev : Tensor(), out.dev, kc.dev, vc.dev, &dl, scale};
        ASSERT_TRUE(ref->attention().attend(ha).ok());
        s = be->attention().attend(da);
        ASSERT_TRUE(s.ok()) << s.to_string();
        double err = rel_error(out.dev_result(*be), out.host_base);
        EXPECT_LE(err, kF32Tol);
        std::printf("attention %s (%s, kv %s): rel err %.3g\n", c.name, form.c_str(), std::string(dtype_name(kv)).c_str(),
                    err);
      }
}

// ---------------------------------------------------------------- conv

TEST(CudaParity, CausalConv1d) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    Rows rows;
    int64_t channels, kernel;
  } cases[] = {{"decode 4B", {{3, 9, 1}, {1, 1, 1}}, 8192, 4},
               {"prefill 4B", {{0, 2}, {70, 3}}, 8192, 4},
               {"prefill tiny k2", {{0}, {9}}, 96, 2},
               {"mixed k5", {{0, 4}, {1, 40}}, 130, 5},
               {"rows shorter than the window k8", {{0, 3, 9, 20}, {2, 1, 6, 33}}, 200, 8}};
  uint32_t seed = 400;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t T = total_tokens(c.rows), R = static_cast<int64_t>(c.rows.n.size());
    HostBatchLayout hl = make_layout(c.rows, 16, seed++);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    Pair xb(*be, random_tensor({T, c.channels + 8}, seed++));
    Pair x = xb.view(xb.host_base.slice(1, 8, 8 + c.channels));
    Pair w(*be, random_tensor({c.channels, c.kernel}, seed++, 0.5f));
    Pair st(*be, random_tensor({R + 1, c.kernel - 1, c.channels}, seed++));
    Pair out(*be, random_tensor({T, c.channels}, seed++));
    ASSERT_TRUE(ref->conv().causal_conv1d({x.host, w.host, st.host, out.host, &cl}).ok());
    Status s = be->conv().causal_conv1d({x.dev, w.dev, st.dev, out.dev, &dl});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LE(rel_error(out.dev_result(*be), out.host_base), kF32Tol);
    EXPECT_LE(rel_error(st.dev_result(*be), st.host_base), kF32Tol);
  }
}

// ---------------------------------------------------------------- gdn

TEST(CudaParity, GatedDeltaRule) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    Rows rows;
    int64_t hk, hv, dk, dv;
    GdnForm cpu_form;  // the CUDA backend is asked for the chunked form unless the CPU runs recurrent
  } cases[] = {
      {"decode 4B", {{5, 0, 12}, {1, 1, 1}}, 16, 32, 128, 128, GdnForm::kRecurrent},
      {"prefill 4B vs chunked", {{0, 3}, {70, 5}}, 16, 32, 128, 128, GdnForm::kChunked},
      {"prefill tiny dk!=dv", {{0}, {130}}, 2, 4, 16, 32, GdnForm::kChunked},
      {"mixed tiny recurrent", {{0, 7}, {65, 1}}, 2, 4, 16, 16, GdnForm::kRecurrent},
  };
  uint32_t seed = 500;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t T = total_tokens(c.rows), R = static_cast<int64_t>(c.rows.n.size());
    HostBatchLayout hl = make_layout(c.rows, 16, seed++);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    // q, k, v are views into one conv-output row, as in the model.
    const int64_t C = 2 * c.hk * c.dk + c.hv * c.dv;
    Pair mixed(*be, random_tensor({T, C}, seed++));
    Pair q = mixed.view(mixed.host_base.as_strided({T, c.hk, c.dk}, {C, c.dk, 1}));
    Pair k = mixed.view(mixed.host_base.as_strided({T, c.hk, c.dk}, {C, c.dk, 1}, c.hk * c.dk));
    Pair v = mixed.view(mixed.host_base.as_strided({T, c.hv, c.dv}, {C, c.dv, 1}, 2 * c.hk * c.dk));
    Pair a(*be, random_tensor({T, c.hv}, seed++));
    Pair b(*be, random_tensor({T, c.hv}, seed++));
    Tensor alog_h = random_tensor({c.hv}, seed++, 0.5f), dtb_h = random_tensor({c.hv}, seed++, 1.f);
    Pair a_log(*be, alog_h), dt_bias(*be, dtb_h);
    Pair state(*be, random_tensor({R + 1, c.hv, c.dk, c.dv}, seed++, 0.1f));
    Pair out(*be, random_tensor({T, c.hv, c.dv}, seed++));
    GdnArgs ha, da;
    for (auto [args, side] : {std::pair{&ha, 0}, std::pair{&da, 1}}) {
      auto pick = [&](const Pair& p) { return side == 0 ? p.host : p.dev; };
      args->form = side == 0 ? c.cpu_form : GdnForm::kChunked;
      args->chunk = 16;
      args->q = pick(q);
      args->k = pick(k);
      args->v = pick(v);
      args->a = pick(a);
      args->b = pick(b);
      args->a_log = pick(a_log);
      args->dt_bias = pick(dt_bias);
      args->state = pick(state);
      args->out = pick(out);
      args->layout = side == 0 ? &cl : &dl;
    }
    if (c.cpu_form == GdnForm::kRecurrent) da.form = GdnForm::kRecurrent;
    ASSERT_TRUE(ref->gdn().delta_rule(ha).ok());
    Status s = be->gdn().delta_rule(da);
    ASSERT_TRUE(s.ok()) << s.to_string();
    // The chunked CPU form rounds differently from the recurrent one: allow 1e-4 there.
    const double tol = c.cpu_form == GdnForm::kChunked ? 1e-4 : kF32Tol;
    double eo = rel_error(out.dev_result(*be), out.host_base), es = rel_error(state.dev_result(*be), state.host_base);
    EXPECT_LE(eo, tol);
    EXPECT_LE(es, tol);
    std::printf("gdn %s: out rel err %.3g, state rel err %.3g\n", c.name, eo, es);
  }
}

// The inputs of one GDN call: q, k, v as views into one conv-output row (as in the model), gates,
// parameters, and a state pool whose rows' slots are reversed.
struct GdnInputs {
  Pair mixed, q, k, v, a, b, a_log, dt_bias, state, out;
  GdnInputs(Backend& be, int64_t T, int64_t R, int64_t hk, int64_t hv, int64_t dk, int64_t dv, uint32_t seed) {
    const int64_t C = 2 * hk * dk + hv * dv;
    mixed = Pair(be, random_tensor({T, C}, seed++));
    q = mixed.view(mixed.host_base.as_strided({T, hk, dk}, {C, dk, 1}));
    k = mixed.view(mixed.host_base.as_strided({T, hk, dk}, {C, dk, 1}, hk * dk));
    v = mixed.view(mixed.host_base.as_strided({T, hv, dv}, {C, dv, 1}, 2 * hk * dk));
    a = Pair(be, random_tensor({T, hv}, seed++));
    b = Pair(be, random_tensor({T, hv}, seed++));
    a_log = Pair(be, random_tensor({hv}, seed++, 0.5f));
    dt_bias = Pair(be, random_tensor({hv}, seed++, 1.f));
    state = Pair(be, random_tensor({R + 1, hv, dk, dv}, seed++, 0.1f));
    out = Pair(be, random_tensor({T, hv, dv}, seed++));
  }
  GdnArgs args(bool host, GdnForm form, int chunk, const BatchLayout* layout) const {
    auto pick = [&](const Pair& p) { return host ? p.host : p.dev; };
    GdnArgs g;
    g.form = form;
    g.chunk = chunk;
    g.q = pick(q);
    g.k = pick(k);
    g.v = pick(v);
    g.a = pick(a);
    g.b = pick(b);
    g.a_log = pick(a_log);
    g.dt_bias = pick(dt_bias);
    g.state = pick(state);
    g.out = pick(out);
    g.layout = layout;
    return g;
  }
};

// The chunked form (chunks of 64; two passes for dk <= 128, else one kernel) against the CPU's
// recurrent form and the CUDA recurrent kernel, each of its two variants: rows crossing chunk
// boundaries, a one-token row inside a prefill batch, every dk it has, dv not a multiple of 32,
// value heads per key head 1..4.
TEST(CudaParity, GatedDeltaRuleChunkedKernel) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  TuningScope tune;
  struct Case {
    const char* name;
    Rows rows;
    int64_t hk, hv, dk, dv;
  } cases[] = {
      {"4B 2 rows", {{0, 5}, {130, 64}}, 16, 32, 128, 128},
      {"4B boundaries", {{0, 0, 3}, {63, 65, 1}}, 16, 32, 128, 128},
      {"dk 16 dv 48", {{0, 2}, {200, 7}}, 2, 4, 16, 48},
      {"dk 32 ratio 1", {{0}, {129}}, 3, 3, 32, 32},
      {"dk 64 ratio 4", {{10, 0}, {40, 100}}, 1, 4, 64, 40},
      {"dk 256", {{0}, {70}}, 1, 2, 256, 64},
  };
  uint32_t seed = 550;
  for (const auto& c : cases) {
    const int64_t T = total_tokens(c.rows), R = static_cast<int64_t>(c.rows.n.size());
    HostBatchLayout hl = make_layout(c.rows, blocks_needed(c.rows) + 1, seed++);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    GdnInputs cpu_rec(*be, T, R, c.hk, c.hv, c.dk, c.dv, seed);
    GdnInputs cuda_rec(*be, T, R, c.hk, c.hv, c.dk, c.dv, seed);  // the same values
    ASSERT_TRUE(ref->gdn().delta_rule(cpu_rec.args(true, GdnForm::kRecurrent, 64, &cl)).ok());
    Status s = be->gdn().delta_rule(cuda_rec.args(false, GdnForm::kRecurrent, 64, &dl));
    ASSERT_TRUE(s.ok()) << s.to_string();
    const Tensor rec_out = cuda_rec.out.dev_result(*be), rec_state = cuda_rec.state.dev_result(*be);
    for (bool two_pass : {true, false}) {
      SCOPED_TRACE(::testing::Message() << c.name << (two_pass ? " two-pass" : " one kernel"));
      GdnInputs chunked(*be, T, R, c.hk, c.hv, c.dk, c.dv, seed);
      tune->gdn_two_pass = two_pass;
      // Where the target's shared memory holds neither chunked form, the recurrent kernel runs.
      const auto fits = [](size_t b) { return b > 0 && static_cast<int64_t>(b) <= cuda::device_target().shared_optin; };
      const bool chunked_runs = fits(cuda::gated_delta_rule_chunked_smem_bytes(c.dk)) ||
                                fits(cuda::gated_delta_rule_chunked_lean_smem_bytes(c.dk));
      ASSERT_EQ(be->gdn().supports(describe(chunked.args(false, GdnForm::kChunked, 64, &dl))).state,
                chunked_runs ? SupportState::kNative : SupportState::kNativeWithConstraints);
      s = be->gdn().delta_rule(chunked.args(false, GdnForm::kChunked, 64, &dl));
      ASSERT_TRUE(s.ok()) << s.to_string();
      const Tensor out_c = chunked.out.dev_result(*be), state_c = chunked.state.dev_result(*be);
      const double eo = rel_error(out_c, cpu_rec.out.host_base), es = rel_error(state_c, cpu_rec.state.host_base);
      const double eo_r = rel_error(out_c, rec_out), es_r = rel_error(state_c, rec_state);
      EXPECT_LE(eo, kChunkedTol);
      EXPECT_LE(es, kChunkedTol);
      EXPECT_LE(eo_r, kChunkedTol);
      EXPECT_LE(es_r, kChunkedTol);
      std::printf("gdn chunked %s (%s): vs cpu recurrent out %.3g state %.3g; vs cuda recurrent out %.3g state %.3g\n",
                  c.name, two_pass ? "two-pass" : "one kernel", eo, es, eo_r, es_r);
      if (!two_pass || c.dk > 128) continue;
      if (!fits(cuda::gated_delta_rule_two_pass_smem_bytes(c.dk))) {
        std::printf("gdn chunked %s: the two-pass form does not fit %s, so no tf32 pass to check\n", c.name,
                    cuda::device_target().label().c_str());
        continue;
      }
      // Products allowed to round (GdnArgs::compute = bf16, a bf16 checkpoint's): one tf32 pass.
      GdnInputs tf32(*be, T, R, c.hk, c.hv, c.dk, c.dv, seed);
      GdnArgs ta = tf32.args(false, GdnForm::kChunked, 64, &dl);
      ta.compute = DType::kBF16;
      s = be->gdn().delta_rule(ta);
      ASSERT_TRUE(s.ok()) << s.to_string();
      const Tensor out_t = tf32.out.dev_result(*be), state_t = tf32.state.dev_result(*be);
      const double to = rel_error(out_t, cpu_rec.out.host_base), ts = rel_error(state_t, cpu_rec.state.host_base);
      EXPECT_LE(to, kTf32ProductsTol);
      EXPECT_LE(ts, kTf32ProductsTol);
      EXPECT_GT(rel_error(out_t, out_c), 0.0) << "the tf32 pass gave 3xTF32's bits: did it run?";
      std::printf("gdn chunked %s (two-pass, tf32 products): vs cpu recurrent out %.3g state %.3g\n", c.name, to, ts);
    }
    seed += 20;
  }
}

// The fused decode step against the CPU running its three steps (conv, recurrent delta rule,
// gated norm) on the same inputs: output, recurrent state and conv state. Rows of one token (the
// decode the model sends) and of several (the kernel takes them in order). Both forms: the one
// kernel, and the split kernels wherever they apply (one token a row), with 1, 2 and 3 stages.
// The 37-row case (1,184 items of a row and value head) gives each block of the persistent state
// kernel several items, so its stages are reused.
TEST(CudaParity, GdnFusedDecodeEqualsConvDeltaRuleAndGatedNorm) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  TuningScope tune;
  struct Case {
    const char* name;
    Rows rows;
    int64_t hk, hv, dk, dv, kernel;
  } cases[] = {
      {"decode 4B", {{5, 0, 12}, {1, 1, 1}}, 16, 32, 128, 128, 4},
      {"decode 4B 9 rows", {{5, 0, 12, 3, 7, 1, 0, 2, 9}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}, 16, 32, 128, 128, 4},
      {"decode 4B 37 rows",
       {{5, 0, 12, 3, 7, 1, 0, 2, 9, 5, 0, 12, 3, 7, 1, 0, 2, 9, 5, 0, 12, 3, 7, 1, 0, 2, 9, 5, 0, 12, 3, 7, 1, 0, 2, 9, 4},
        std::vector<int64_t>(37, 1)},
       16, 32, 128, 128, 4},
      {"decode tiny dk!=dv", {{3, 9}, {1, 1}}, 2, 4, 16, 32, 4},
      // One state kernel instance (dk 16) on a narrower head, then the wider one again: a launch
      // must not leave the instance's shared-memory limit at its own, smaller size.
      {"tiny dk=dv after a wider head", {{3, 9}, {1, 1}}, 2, 4, 16, 16, 4},
      {"tiny dk!=dv again", {{4, 2}, {1, 1}}, 2, 4, 16, 32, 4},
      {"ratio 1 kernel 3", {{0}, {1}}, 2, 2, 64, 64, 3},
      {"several tokens a row", {{0, 7}, {3, 2}}, 2, 4, 16, 16, 4},
  };
  // One kernel; split with 1, 2 and 3 stages; the form timed on this device for the shape (on
  // scratch state: the step itself must still advance the state exactly once).
  for (int form : {0, 1, 2, 3, -1}) {
  const bool split = form > 0;
  tune->gdn_decode_form = form;
  const char* form_names[] = {"timed", "one kernel", "split, 1 stage", "split, 2 stages", "split, 3 stages"};
  const char* form_name = form_names[form + 1];
  uint32_t seed = 650;
  for (const auto& c : cases) {
    SCOPED_TRACE(std::string(c.name) + " (" + form_name + ")");
    const int64_t T = total_tokens(c.rows), R = static_cast<int64_t>(c.rows.n.size());
    const int64_t C = 2 * c.hk * c.dk + c.hv * c.dv;
    HostBatchLayout hl = make_layout(c.rows, blocks_needed(c.rows) + 1, seed++);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    Pair mixed_b(*be, random_tensor({T, C + 8}, seed++));  // strided rows, as a view of a wider buffer
    Pair mixed = mixed_b.view(mixed_b.host_base.slice(1, 0, C));
    Pair conv_w(*be, random_tensor({C, c.kernel}, seed++, 0.5f));
    Pair conv_st(*be, random_tensor({R + 1, c.kernel - 1, C}, seed++));
    Pair zb(*be, random_tensor({T, 2 * c.hv * c.dv}, seed++));  // z strided per token
    Pair z = zb.view(zb.host_base.as_strided({T, c.hv, c.dv}, {2 * c.hv * c.dv, c.dv, 1}));
    Pair a(*be, random_tensor({T, c.hv}, seed++));
    Pair b(*be, random_tensor({T, c.hv}, seed++));
    Pair a_log(*be, random_tensor({c.hv}, seed++, 0.5f));
    Pair dt_bias(*be, random_tensor({c.hv}, seed++, 1.f));
    Pair state(*be, random_tensor({R + 1, c.hv, c.dk, c.dv}, seed++, 0.1f));
    Pair norm_w(*be, random_tensor({c.dv}, seed++, 0.5f));
    Pair out(*be, random_tensor({T, c.hv, c.dv}, seed++));
    // The CPU: conv into a scratch row, the recurrent rule on its views, the gated norm.
    Tensor conv_out = Tensor::empty({T, C}, DType::kF32), core = Tensor::empty({T, c.hv, c.dv}, DType::kF32);
    ASSERT_TRUE(ref->conv().causal_conv1d({mixed.host, conv_w.host, conv_st.host, conv_out, &cl}).ok());
    GdnArgs g;
    g.form = GdnForm::kRecurrent;
    g.q = conv_out.as_strided({T, c.hk, c.dk}, {C, c.dk, 1});
    g.k = conv_out.as_strided({T, c.hk, c.dk}, {C, c.dk, 1}, c.hk * c.dk);
    g.v = conv_out.as_strided({T, c.hv, c.dv}, {C, c.dv, 1}, 2 * c.hk * c.dk);
    g.a = a.host;
    g.b = b.host;
    g.a_log = a_log.host;
    g.dt_bias = dt_bias.host;
    g.state = state.host;
    g.out = core;
    g.layout = &cl;
    ASSERT_TRUE(ref->gdn().delta_rule(g).ok());
    for (int64_t t = 0; t < T; ++t) {  // z is strided per token: the norm runs token by token
      Tensor zt = z.host.select(0, t), ct = core.select(0, t), ot = out.host.select(0, t);
      ASSERT_TRUE(ref->norm().rms_norm({NormKind::kGated, ct, {}, norm_w.host, zt, ot, 1e-6f}).ok());
    }
    GdnDecodeArgs d{mixed.dev, conv_w.dev, conv_st.dev, z.dev, a.dev, b.dev, a_log.dev, dt_bias.dev, state.dev,
                    norm_w.dev, out.dev, c.hk, c.dk, 1e-6f, &dl};
    ASSERT_EQ(be->gdn().supports(describe(d)).state, SupportState::kNative);
    const std::string key = "gdn_decode rows=" + std::to_string(R) + " k_heads=" + std::to_string(c.hk) +
                            " v_heads=" + std::to_string(c.hv) + " dk=" + std::to_string(c.dk) +
                            " dv=" + std::to_string(c.dv);
    if (form < 0) cuda::kernel_choices().forget(key);
    Status s = be->gdn().fused_decode(d);
    ASSERT_TRUE(s.ok()) << s.to_string();
    std::string chosen;
    if (form < 0 && T == R && cuda::gdn_decode_split_applies(c.dk, c.dv)) {  // several forms: one was timed
      const std::optional<std::string> pick = cuda::kernel_choices().find(key);
      ASSERT_TRUE(pick.has_value()) << key;
      EXPECT_TRUE(*pick == "one_kernel" || *pick == "split1" || *pick == "split2" || *pick == "split3") << *pick;
      chosen = " -> " + *pick;
    }
    const double eo = rel_error(out.dev_result(*be), out.host_base);
    const double es = rel_error(state.dev_result(*be), state.host_base);
    const double ec = rel_error(conv_st.dev_result(*be), conv_st.host_base);
    EXPECT_LE(eo, kF32Tol);
    EXPECT_LE(es, kF32Tol);
    EXPECT_EQ(ec, 0.0);  // the conv state is the inputs, moved
    std::printf("gdn fused decode %s (%s%s): out rel err %.3g, state %.3g, conv state %.3g\n", c.name,
                split && T != R ? "one kernel" : form_name, chosen.c_str(), eo, es, ec);
  }
  }
}

// ---------------------------------------------------------------- elementwise, sampling

TEST(CudaParity, EmbeddingGather) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 600;
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    Pair table(*be, random_tensor({300, 72}, seed++, 1.f, t));
    Pair ids(*be, host_i32({0, 299, 17, 17, 150}));
    Pair out(*be, random_tensor({5, 72}, seed++));
    ASSERT_TRUE(ref->elementwise().embed({ids.host, table.host, out.host}).ok());
    Status s = be->elementwise().embed({ids.dev, table.dev, out.dev});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(rel_error(out.dev_result(*be), out.host_base), 0.0);
  }
}

TEST(CudaParity, AddAndSiluMul) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  uint32_t seed = 700;
  for (const BinaryOpInfo& info : kBinaryOps)
    for (int64_t width : {1, 100, 9216}) {
      const ElementwiseOp op = info.op;
      SCOPED_TRACE(::testing::Message() << "op=" << info.name << " width=" << width);
      const int64_t rows = 6;
      Pair ab(*be, random_tensor({rows, width + 4}, seed++, 3.f));
      Pair a = ab.view(ab.host_base.slice(1, 4, 4 + width));
      Pair b(*be, random_tensor({rows, width}, seed++));
      ASSERT_TRUE(ref->elementwise().binary({op, a.host, b.host, a.host}).ok());  // in place, as the MLP
      Status s = be->elementwise().binary({op, a.dev, b.dev, a.dev});
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_LE(rel_error(ab.dev_result(*be), ab.host_base), kF32Tol);
    }
}

// silu-mul may write the down projection's operand in the weight's 16-bit dtype (BinaryArgs): the
// f32 result rounded to nearest even, so the GEMM on it equals, bit for bit, the GEMM on the f32
// activation (which rounds x the same way). The CPU declines a 16-bit output; the CUDA backend
// declines a 16-bit x for decode-sized GEMMs (the GEMV reads f32 x), any other op's 16-bit
// output, and both with tuning().bf16_operands off.
TEST(CudaParity, SiluMulWritesTheDownProjectionsOperand) {
  KILN_CUDA_OR_SKIP(be);
  TuningScope tune;
  const int64_t m = 300, I = 9216, H = 2560;
  const DType F = DType::kF32;
  for (DType t : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(dtype_name(t));
    const Tensor gate = to_device(*be, random_tensor({m, I}, 900, 3.f)), up = to_device(*be, random_tensor({m, I}, 901));
    const Tensor w = to_device(*be, random_tensor({H, I}, 902, 1.f / std::sqrt(float(I)), t));
    const Tensor act32 = be->storage().allocate({m, I}, F).value(), act16 = be->storage().allocate({m, I}, t).value();
    ASSERT_TRUE(be->elementwise().binary({ElementwiseOp::kSiluMul, gate, up, act32}).ok());
    Status s = be->elementwise().binary({ElementwiseOp::kSiluMul, gate, up, act16});
    ASSERT_TRUE(s.ok()) << s.to_string();
    const Tensor a32 = to_host(*be, act32), a16 = to_host(*be, act16);
    int64_t differ = 0;
    for (int64_t i = 0; i < m * I; ++i) {
      const float v = a32.data<float>()[i];
      differ += (t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v)) != a16.data<uint16_t>()[i];
    }
    EXPECT_EQ(differ, 0) << "elements not the f32 result rounded to nearest even";
    const Tensor start = random_tensor({m, H}, 903);
    const Tensor y32 = to_device(*be, start), y16 = to_device(*be, start);
    ASSERT_TRUE(be->linear().matmul({act32, w, y32, true}).ok());
    s = be->linear().matmul({act16, w, y16, true});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(rel_error(to_host(*be, y16), to_host(*be, y32)), 0.0);
  }
  const DType B = DType::kBF16;
  EXPECT_FALSE(cpu()->elementwise().supports({ElementwiseOp::kSiluMul, m, I, F, B}).runs_natively());
  EXPECT_FALSE(cpu()->linear().supports({m, H, I, B, B, F, true}).runs_natively());
  EXPECT_FALSE(be->linear().supports({8, H, I, B, B, F, true}).runs_natively()) << "decode-sized";
  EXPECT_FALSE(be->elementwise().supports({ElementwiseOp::kAdd, m, I, F, B}).runs_natively()) << "add's out16 is false";
  EXPECT_TRUE(be->linear().supports({m, H, I, B, B, F, true}).runs_natively());
  tune->bf16_operands = false;
  EXPECT_FALSE(be->linear().supports({m, H, I, B, B, F, true}).runs_natively());
  EXPECT_FALSE(be->elementwise().supports({ElementwiseOp::kSiluMul, m, I, F, B}).runs_natively());
}

// The norms before projections write their GEMM operand in bf16/f16 (NormArgs::out):
// each element is the f32 output rounded to nearest even, for the input norm's (1 + w) form
// (2,560 columns: the block-a-row kernel at 300 rows, the float4 one at a 64-row decode step) and
// the GDN gated norm (the narrow kernel, 128 columns), so the projection's result is that of the
// f32 output. The CPU declines a 16-bit output; the CUDA backend does with tuning().bf16_operands off.
TEST(CudaParity, NormsWriteTheProjectionsOperand) {
  KILN_CUDA_OR_SKIP(be);
  TuningScope tune;
  const DType F = DType::kF32;
  struct Case { NormKind kind; int64_t rows, width; };
  for (const Case c : {Case{NormKind::kOnePlus, 300, 2560}, Case{NormKind::kOnePlus, 64, 2560},
                       Case{NormKind::kGated, 300 * 32, 128}}) {
    for (DType t : {DType::kBF16, DType::kF16}) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " width " + std::to_string(c.width));
      const Tensor x = to_device(*be, random_tensor({c.rows, c.width}, 910, 2.f));
      const Tensor w = to_device(*be, random_tensor({c.width}, 911, 0.5f));
      const Tensor z = c.kind == NormKind::kGated ? to_device(*be, random_tensor({c.rows, c.width}, 912, 2.f)) : Tensor();
      const Tensor y32 = be->storage().allocate({c.rows, c.width}, F).value();
      const Tensor y16 = be->storage().allocate({c.rows, c.width}, t).value();
      ASSERT_TRUE(be->norm().rms_norm({c.kind, x, {}, w, z, y32, 1e-6f}).ok());
      Status s = be->norm().rms_norm({c.kind, x, {}, w, z, y16, 1e-6f});
      ASSERT_TRUE(s.ok()) << s.to_string();
      const Tensor a32 = to_host(*be, y32), a16 = to_host(*be, y16);
      int64_t differ = 0;
      for (int64_t i = 0; i < c.rows * c.width; ++i) {
        const float v = a32.data<float>()[i];
        differ += (t == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v)) != a16.data<uint16_t>()[i];
      }
      EXPECT_EQ(differ, 0) << "elements not the f32 result rounded to nearest even";
      if (c.kind != NormKind::kOnePlus) continue;
      const Tensor proj = to_device(*be, random_tensor({1024, c.width}, 913, 1.f / std::sqrt(float(c.width)), t));
      const Tensor o32 = be->storage().allocate({c.rows, 1024}, F).value();
      const Tensor o16 = be->storage().allocate({c.rows, 1024}, F).value();
      ASSERT_TRUE(be->linear().matmul({y32, proj, o32}).ok());
      s = be->linear().matmul({y16, proj, o16});
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_EQ(rel_error(to_host(*be, o16), to_host(*be, o32)), 0.0);
    }
  }
  const DType B = DType::kBF16;
  const NormRequest req{NormKind::kOnePlus, 300, 2560, F, false, B};
  EXPECT_FALSE(cpu()->norm().supports(req).runs_natively());
  EXPECT_TRUE(be->norm().supports(req).runs_natively());
  tune->bf16_operands = false;
  EXPECT_FALSE(be->norm().supports(req).runs_natively());
}

TEST(CudaParity, ArgmaxTiesInfAndNan) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const int64_t V = 248320;
  Tensor logits = random_tensor({5, V}, 800);
  float* l = logits.data<float>();
  l[0 * V + 7] = l[0 * V + 9000] = 50.f;                              // a tie: the first wins
  for (int64_t j = 0; j < V; ++j) l[1 * V + j] = -INFINITY;          // all -inf: index 0
  for (int64_t j = 0; j < V; ++j) l[2 * V + j] = NAN;                // all NaN: index 0
  l[3 * V + 5] = NAN;
  l[3 * V + V - 1] = 60.f;                                           // NaN never wins
  Tensor want = Tensor::empty({5}, DType::kI32);
  ASSERT_TRUE(ref->sampling().argmax({logits, want}).ok());
  // Device tensors.
  Tensor dl = to_device(*be, logits), dids = be->storage().allocate({5}, DType::kI32).value();
  ASSERT_TRUE(be->sampling().argmax({dl, dids}).ok());
  Tensor got = to_host(*be, dids);
  // Host tensors (staged through the device).
  Tensor got_host = Tensor::empty({5}, DType::kI32);
  Status s = be->sampling().argmax({logits, got_host});
  ASSERT_TRUE(s.ok()) << s.to_string();
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(got.data<int32_t>()[i], want.data<int32_t>()[i]) << "row " << i;
    EXPECT_EQ(got_host.data<int32_t>()[i], want.data<int32_t>()[i]) << "row " << i;
  }
  EXPECT_EQ(want.data<int32_t>()[0], 7);
  EXPECT_EQ(want.data<int32_t>()[3], V - 1);
}

// A row spans several blocks, the last of which reduces their partial results and resets the
// row's counter: many rows (past the first counter allocation), called twice, equal the CPU.
TEST(CudaParity, ArgmaxOverManyRowsAndRepeatedCalls) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  for (int64_t V : {int64_t{100}, int64_t{20000}, int64_t{8192 * 3 + 1}}) {
    const int64_t rows = 100;
    Tensor logits = random_tensor({rows, V}, 810 + static_cast<uint32_t>(V));
    for (int64_t r = 0; r < rows; ++r) logits.data<float>()[r * V + (r * 7919) % V] = 10.f + static_cast<float>(r % 3);
    Tensor want = Tensor::empty({rows}, DType::kI32);
    ASSERT_TRUE(ref->sampling().argmax({logits, want}).ok());
    Tensor dl = to_device(*be, logits), dids = be->storage().allocate({rows}, DType::kI32).value();
    for (int call = 0; call < 2; ++call) {
      ASSERT_TRUE(be->storage().zero(dids).ok());
      ASSERT_TRUE(be->sampling().argmax({dl, dids}).ok());
      Tensor got = to_host(*be, dids);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_EQ(got.data<int32_t>()[r], want.data<int32_t>()[r]) << "V=" << V << " row " << r << " call " << call;
    }
  }
}

// Structured-output rows in the argmax (sample_parity.h): the CPU reference's ids, every masked
// id allowed, on device and host logits.
TEST(CudaParity, MaskedArgmaxMatchesCpu) {
  KILN_CUDA_OR_SKIP(be);
  testing::expect_masked_argmax_matches_cpu(*be);
}

TEST(CudaParity, StorageRoundTripAndZeroedAllocations) {
  KILN_CUDA_OR_SKIP(be);
  Tensor h = random_tensor({3, 1000}, 900);
  Tensor d = to_device(*be, h);
  Tensor back = to_host(*be, d);
  EXPECT_EQ(rel_error(back, h), 0.0);
  ASSERT_TRUE(be->storage().zero(d.slice(0, 1, 2)).ok());
  back = to_host(*be, d);
  for (int64_t j = 0; j < 1000; ++j) ASSERT_EQ(back.data<float>()[1000 + j], 0.f);
  EXPECT_EQ(back.data<float>()[5], h.data<float>()[5]);
  // Memory handed back to the pool is zeroed again when allocated.
  d = Tensor();
  for (int i = 0; i < 3; ++i) {
    Tensor z = be->storage().allocate({3, 1000}, DType::kF32).value();
    Tensor zh = to_host(*be, z);
    for (int64_t j = 0; j < zh.numel(); ++j) ASSERT_EQ(zh.data<float>()[j], 0.f);
  }
  CudaBackendStats st = cuda_backend_stats(*be).value();
  EXPECT_GE(st.pool_hits, 2u);
}

// Every host wait on the device is counted (Context::synchronize): kiln bench train reports the
// waits a step and the share of the step the host spent in them.
TEST(CudaParity, HostWaitsOnTheDeviceAreCounted) {
  KILN_CUDA_OR_SKIP(be);
  const Tensor d = to_device(*be, random_tensor({4, 256}, 901));
  const CudaBackendStats s0 = cuda_backend_stats(*be).value();
  Tensor h = Tensor::empty({4, 256}, DType::kF32);
  ASSERT_TRUE(be->storage().copy_to_host(d, h).ok());  // waits once
  ASSERT_TRUE(be->storage().synchronize().ok());       // and again
  const CudaBackendStats s1 = cuda_backend_stats(*be).value();
  EXPECT_EQ(s1.synchronizations, s0.synchronizations + 2);
  EXPECT_GT(s1.host_wait_seconds, s0.host_wait_seconds);
}

}  // namespace
}  // namespace kiln
