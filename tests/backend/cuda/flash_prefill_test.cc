// The tensor-core attention kernels (AttentionArgs::compute = bf16): prefill (kernels/flash_prefill.cu)
// below, and decode (kernels/paged_decode_mma.cu) further down. The prefill kernel against the CPU facet's f32 attention, on q, K and V already rounded to bf16: the kernel's
// own rounding of them is then exact, and what differs is P rounded to bf16 for its product with
// V, and the order of the f32 sums. Bound: each p_j carries a relative error <= 2^-9, so the
// numerator sum_j p_j v_j (the denominator keeps f32 p) is off by <= 2^-9 sum_j p_j |v_j|, i.e.
// the output by <= 2^-9 max|v| in the worst case, and as a random walk over the keys far less;
// on these N(0, 1) inputs, where the softmax is wide and max|out| is smaller than max|v|, we
// allow 1e-2 of max|out| at any element and 1e-3 of it on average (a missing causal mask or a
// wrong key tile gives errors of order 1). The same requests with compute = f32 must take the
// f32 kernels (2e-5, the parity bound), and so must bf16 requests the flash kernel declines
// (head_dim 64, short rows) or that KILN_CUDA_FLASH_PREFILL=0 turns away: bit-equal to f32. The
// same caches in bf16 give bit-equal results (the f32 kernels widen bf16 exactly).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernel_timing.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/tuning.h"

namespace kiln {
namespace {

using testing::random_tensor;
using testing::rel_error;
using testing::converted;
using testing::round_to;
using testing::same_view;
using testing::widened;
using testing::to_device;
using testing::to_host;

constexpr double kFlashMaxTol = 1e-2, kFlashMeanTol = 1e-3, kF32Tol = 2e-5;

// mean |got - want| / max |want| over two contiguous f32 tensors.
double mean_rel_error(const Tensor& got, const Tensor& want) {
  double sum = 0, scale = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    sum += std::fabs(double(got.data<float>()[i]) - want.data<float>()[i]);
    scale = std::max(scale, std::fabs(double(want.data<float>()[i])));
  }
  return sum / std::max<int64_t>(want.numel(), 1) / std::max(scale, 1e-30);
}

// Rows continuing `past` cached tokens with `n` new ones, their K/V blocks taken from a shuffled
// pool so that no row's blocks are contiguous.
HostBatchLayout shuffled_layout(const std::vector<int64_t>& past, const std::vector<int64_t>& n, int64_t pool_blocks,
                                uint32_t seed) {
  std::vector<int32_t> pool(pool_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  HostBatchLayout h;
  h.block_size = 64;
  auto next = pool.begin();
  for (size_t i = 0; i < past.size(); ++i) {
    const int64_t need = (past[i] + n[i] + 63) / 64;
    h.add_row(past[i], n[i], std::vector<int32_t>(next, next + need), static_cast<int32_t>(i));
    next += need;
  }
  return h;
}

// A host tensor and its device copy.
struct Twin {
  Tensor host, dev;
  Twin() = default;
  Twin(Backend& be, Tensor h) : host(std::move(h)), dev(to_device(be, host)) {}
};

// An attention request's inputs on the CPU reference and the device: rows continuing `past`
// cached tokens with `n` new ones (shuffled_layout), bf16-exact caches (f32) with the new tokens'
// K/V written over their slots by each facet, and q and the gate interleaved per head as the
// model's q_proj output (q bf16-exact, the gate f32). Seeds are taken from `seed` in turn.
struct AttentionInputs {
  int64_t tokens = 0, blocks = 3;
  BatchLayout cl, dl;  // the CPU's and the device's
  Twin kc, vc, qg;
  Tensor q_view, g_view, q_dev, g_dev;  // views of qg.host and qg.dev

  AttentionInputs(Backend& be, Backend& ref, const std::vector<int64_t>& past, const std::vector<int64_t>& n, int64_t hq,
                  int64_t hkv, int64_t d, uint32_t& seed) {
    for (size_t i = 0; i < n.size(); ++i) {
      tokens += n[i];
      blocks += (past[i] + n[i] + 63) / 64;
    }
    const int64_t T = tokens;
    HostBatchLayout hl = shuffled_layout(past, n, blocks, seed++);
    cl = make_batch_layout(hl, ref.storage()).value();
    dl = make_batch_layout(hl, be.storage()).value();
    kc = Twin(be, round_to(random_tensor({blocks, 64, hkv, d}, seed++), DType::kBF16));
    vc = Twin(be, round_to(random_tensor({blocks, 64, hkv, d}, seed++), DType::kBF16));
    Twin k(be, round_to(random_tensor({T, hkv, d}, seed++), DType::kBF16));
    Twin v(be, round_to(random_tensor({T, hkv, d}, seed++), DType::kBF16));
    EXPECT_TRUE(ref.attention().write_kv({k.host, v.host, kc.host, vc.host, cl.slot_mapping}).ok());
    Status s = be.attention().write_kv({k.dev, v.dev, kc.dev, vc.dev, dl.slot_mapping});
    EXPECT_TRUE(s.ok()) << s.to_string();
    Tensor qg_host = random_tensor({T, hq * 2 * d}, seed++);
    for (int64_t e = 0; e < qg_host.numel(); ++e)
      if (e % (2 * d) < d) qg_host.data<float>()[e] = rounded_to(DType::kBF16, qg_host.data<float>()[e]);
    qg = Twin(be, qg_host);
    q_view = qg.host.as_strided({T, hq, d}, {hq * 2 * d, 2 * d, 1});
    g_view = qg.host.as_strided({T, hq, d}, {hq * 2 * d, 2 * d, 1}, d);
    q_dev = same_view(qg.dev, q_view, qg.host);
    g_dev = same_view(qg.dev, g_view, qg.host);
  }
};

struct Case {
  const char* name;
  std::vector<int64_t> past, n;
  int64_t hq, hkv, d;
  bool gate;
  bool flash;                // whether the flash kernel takes the bf16 request
  int64_t min_q_len = 64;    // tuning().flash_prefill_min_q_len for the case
};

class FlashPrefill : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = cuda::tuning(); }
  void TearDown() override { cuda::tuning() = saved_; }
  cuda::Tuning saved_;
};

TEST_F(FlashPrefill, MatchesCpuOnBf16RoundedInputs) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = std::move(create_backend("cpu").value());
  const Case cases[] = {
      {"4B one row of 1000", {0}, {1000}, 16, 4, 256, true, true},
      {"4B rows of 63, 64, 65", {0, 0, 0}, {63, 64, 65}, 16, 4, 256, true, true},
      {"4B 1 and 300 over cached prefixes", {0, 130}, {1, 300}, 16, 4, 256, false, true},
      {"4B 300 over a 1000-token prefix, and 64", {1000, 64}, {300, 64}, 16, 4, 256, true, true},
      {"d128 mha 300, 64 and 1", {0, 70, 5}, {300, 64, 1}, 8, 8, 128, false, true},
      {"d128 mha 1000 over a prefix", {37}, {1000}, 8, 8, 128, true, true},
      {"4B rows of 1 and 2 (threshold 1)", {0, 40}, {1, 2}, 16, 4, 256, true, true, 1},
      {"4B rows of 63 (below the threshold)", {0, 10}, {63, 20}, 16, 4, 256, true, false},
      {"head_dim 64 (declined)", {0}, {100}, 4, 2, 64, true, false},
  };
  uint32_t seed = 900;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    AttentionInputs in(*be, *ref, c.past, c.n, c.hq, c.hkv, c.d, seed);
    const int64_t T = in.tokens;
    Twin &kc = in.kc, &vc = in.vc;
    const BatchLayout &cl = in.cl, &dl = in.dl;
    const Tensor &q_view = in.q_view, &g_view = in.g_view, &q_dev = in.q_dev, &g_dev = in.g_dev;
    const float scale = 1.f / std::sqrt(float(c.d));

    Tensor want = Tensor::empty({T, c.hq, c.d}, DType::kF32);
    ASSERT_TRUE(ref->attention()
                    .attend({q_view, c.gate ? g_view : Tensor(), want, kc.host, vc.host, &cl, scale})
                    .ok());
    // One CUDA run with the given compute dtype and flash switch, into a fresh random output.
    auto run = [&](DType compute, bool flash_on) {
      cuda::tuning().flash_prefill = flash_on;
      cuda::tuning().flash_prefill_min_q_len = c.min_q_len;
      Twin out(*be, random_tensor({T, c.hq, c.d}, 7));
      AttentionArgs a{q_dev, c.gate ? g_dev : Tensor(), out.dev, kc.dev, vc.dev, &dl, scale};
      a.compute = compute;
      Status st = be->attention().attend(a);
      EXPECT_TRUE(st.ok()) << st.to_string();
      return to_host(*be, out.dev);
    };
    const Tensor exact = run(DType::kF32, true);
    const Tensor turned_away = run(DType::kBF16, false);
    const Tensor bf16 = run(DType::kBF16, true);
    // The same caches held in bf16 (ModelState's choice for a bf16 checkpoint): every kernel then
    // reads the very values it rounded the f32 cache to, so the results are bit-equal.
    const Tensor kc32 = kc.dev, vc32 = vc.dev;
    kc.dev = to_device(*be, converted(to_host(*be, kc32), DType::kBF16));
    vc.dev = to_device(*be, converted(to_host(*be, vc32), DType::kBF16));
    const Tensor bf16_cache = run(DType::kBF16, true);
    // In e4m3 (memory.kv_cache_fp8) the values change, but the kernel must read back exactly the
    // e4m3 values: the same result as f32 caches holding them.
    const Tensor k8 = converted(to_host(*be, kc32), DType::kF8E4M3), v8 = converted(to_host(*be, vc32), DType::kF8E4M3);
    kc.dev = to_device(*be, k8);
    vc.dev = to_device(*be, v8);
    const Tensor e4m3_cache = run(DType::kBF16, true);
    kc.dev = to_device(*be, widened(k8));
    vc.dev = to_device(*be, widened(v8));
    const Tensor e4m3_values = run(DType::kBF16, true);
    kc.dev = kc32;
    vc.dev = vc32;
    EXPECT_EQ(rel_error(bf16_cache, bf16), 0.0) << "a bf16 cache must give what the f32 cache of the same values gives";
    EXPECT_EQ(rel_error(e4m3_cache, e4m3_values), 0.0) << "an e4m3 cache must give what f32 caches of its values give";
    EXPECT_GT(rel_error(e4m3_cache, bf16), 0.0) << "e4m3 rounding moved nothing: the cache was not e4m3";

    EXPECT_LE(rel_error(exact, want), kF32Tol);
    EXPECT_EQ(rel_error(turned_away, exact), 0.0) << "KILN_CUDA_FLASH_PREFILL=0 must keep the f32 kernels";
    const double max_err = rel_error(bf16, want), mean_err = mean_rel_error(bf16, want);
    if (c.flash) {
      EXPECT_LE(max_err, kFlashMaxTol);
      EXPECT_LE(mean_err, kFlashMeanTol);
      // P's rounding moves some output bits: equality would mean the f32 kernel ran instead.
      EXPECT_GT(rel_error(bf16, exact), 0.0) << "the flash kernel did not run";
    } else {
      EXPECT_EQ(rel_error(bf16, exact), 0.0) << "a request the flash kernel declines takes the f32 kernels";
    }
    std::printf("flash prefill %-45s max %.3g mean %.3g (f32 kernels %.3g)\n", c.name, max_err, mean_err,
                rel_error(exact, want));
  }
}

// Below 512 tokens a row, whether flash or the f32 kernels serve a bf16 prefill is timed on this
// device per shape (kernel_timing.h): the timing runs both into scratch, records its pick under
// the shape's key, and the call's output is then exactly what the picked kernel gives on its own.
TEST_F(FlashPrefill, AShortPrefillTakesTheKernelTimedFasterForItsShape) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = std::move(create_backend("cpu").value());
  uint32_t seed = 950;
  AttentionInputs in(*be, *ref, {0, 30}, {20, 40}, 16, 4, 256, seed);
  const std::string key = "attention_prefill q_heads=16 kv_heads=4 head_dim=256 kv=f32 gate rows<=2 q<=64 keys<=128";
  auto run = [&](int64_t min_q_len, bool flash_on) {
    cuda::tuning().flash_prefill = flash_on;
    cuda::tuning().flash_prefill_min_q_len = min_q_len;
    Twin out(*be, random_tensor({in.tokens, 16, 256}, 7));
    AttentionArgs a{in.q_dev, in.g_dev, out.dev, in.kc.dev, in.vc.dev, &in.dl, 1.f / 16.f};
    a.compute = DType::kBF16;
    Status st = be->attention().attend(a);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return to_host(*be, out.dev);
  };
  cuda::kernel_choices().forget(key);
  const Tensor timed = run(0, true);
  const std::optional<std::string> pick = cuda::kernel_choices().find(key);
  ASSERT_TRUE(pick.has_value()) << "no choice recorded under " << key;
  ASSERT_TRUE(*pick == "flash" || *pick == "f32") << *pick;
  const Tensor flash = run(1, true), f32 = run(0, false);
  EXPECT_EQ(rel_error(timed, *pick == "flash" ? flash : f32), 0.0) << "the call ran another kernel than its pick";
  EXPECT_GT(rel_error(flash, f32), 0.0) << "flash and f32 kernels gave the same bits: one did not run";
  std::printf("flash prefill rows of 20 and 40 over 0 and 30 cached: %s timed faster\n", pick->c_str());
}

// The tensor-core decode attention (compute = bf16 over a bf16 cache, kernels/paged_decode_mma.cu)
// against the CPU facet's f32 attention on the same bf16-exact q, K and V: the bound is the flash
// kernel's (P rounded to bf16 for its product with V). Decode batches of rows with lengths that
// are not multiples of the 16-key tile, shorter than a tile, and long enough to split; the 4B
// group (4 heads of 256), a group of 1 (128) and of 8 (64). Each plan (1, 2 and 3 units a warp:
// different splits) stays within the bound and repeats bit for bit. A request the kernel declines
// (f32 cache, compute f32, or tuning().attention_decode_mma off) takes the f32 kernels: bit-equal to
// them.
TEST_F(FlashPrefill, DecodeMmaMatchesCpuOnBf16RoundedInputs) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = std::move(create_backend("cpu").value());
  std::mt19937 lengths(17);
  std::vector<int64_t> mixed(64);
  for (int64_t& x : mixed) x = std::uniform_int_distribution<int64_t>(0, 1500)(lengths);
  mixed[0] = 0;    // one key
  mixed[1] = 14;   // 15 keys: part of one tile
  mixed[2] = 15;   // exactly a tile
  mixed[3] = 63;   // exactly a cache block
  mixed[4] = 4000;
  struct DecodeCase {
    const char* name;
    std::vector<int64_t> past;
    int64_t hq, hkv, d;
    bool gate;
  } cases[] = {
      {"4B one row of 1056 keys", {1055}, 16, 4, 256, true},
      {"4B one row of 9000 keys (many splits)", {8999}, 16, 4, 256, true},
      {"4B 64 rows of mixed lengths", mixed, 16, 4, 256, true},
      {"4B 3 rows of 1, 17 and 300 keys, no gate", {0, 16, 299}, 16, 4, 256, false},
      {"d128 mha 5 rows", {0, 100, 1000, 31, 64}, 8, 8, 128, true},
      {"d64 group of 8, 4 rows", {2000, 5, 333, 64}, 16, 2, 64, true},
  };
  uint32_t seed = 4100;
  for (const DecodeCase& c : cases) {
    SCOPED_TRACE(c.name);
    AttentionInputs in(*be, *ref, c.past, std::vector<int64_t>(c.past.size(), 1), c.hq, c.hkv, c.d, seed);
    const int64_t T = in.tokens;
    const Twin &kc = in.kc, &vc = in.vc;
    const BatchLayout &cl = in.cl, &dl = in.dl;
    ASSERT_EQ(dl.phase, Phase::kDecode);
    const Tensor &q_view = in.q_view, &g_view = in.g_view, &q_dev = in.q_dev, &g_dev = in.g_dev;
    const Tensor kc32 = kc.dev, vc32 = vc.dev;
    const Tensor kc16 = to_device(*be, converted(to_host(*be, kc32), DType::kBF16));
    const Tensor vc16 = to_device(*be, converted(to_host(*be, vc32), DType::kBF16));
    const float scale = 1.f / std::sqrt(float(c.d));

    Tensor want = Tensor::empty({T, c.hq, c.d}, DType::kF32);
    ASSERT_TRUE(ref->attention().attend({q_view, c.gate ? g_view : Tensor(), want, kc.host, vc.host, &cl, scale}).ok());
    auto run = [&](DType compute, bool mma_on, bool bf16_cache, int units_per_warp = 1) {
      cuda::tuning().attention_decode_mma = mma_on;
      cuda::tuning().attention_mma_units_per_warp = units_per_warp;
      Twin out(*be, random_tensor({T, c.hq, c.d}, 7));
      AttentionArgs a{q_dev, c.gate ? g_dev : Tensor(), out.dev, bf16_cache ? kc16 : kc32, bf16_cache ? vc16 : vc32,
                      &dl, scale};
      a.compute = compute;
      Status st = be->attention().attend(a);
      EXPECT_TRUE(st.ok()) << st.to_string();
      return to_host(*be, out.dev);
    };
    const Tensor exact = run(DType::kF32, true, true);
    EXPECT_LE(rel_error(exact, want), kF32Tol);
    EXPECT_EQ(rel_error(run(DType::kBF16, false, true), exact), 0.0) << "attention_decode_mma off must keep the f32 kernels";
    EXPECT_EQ(rel_error(run(DType::kBF16, true, false), run(DType::kF32, true, false)), 0.0)
        << "an f32 cache must keep the f32 kernels";
    if (!cuda::paged_decode_mma_applies(c.d, c.hq / c.hkv, DType::kBF16)) {
      std::printf("decode mma %s: two stages at head_dim %lld do not fit %s (the f32 kernels serve it)\n", c.name,
                  static_cast<long long>(c.d), cuda::device_target().label().c_str());
      EXPECT_EQ(rel_error(run(DType::kBF16, true, true), exact), 0.0) << "the f32 kernels must serve it";
      continue;
    }
    for (int units : {1, 2, 3}) {
      SCOPED_TRACE(units);
      const Tensor got = run(DType::kBF16, true, true, units);
      const double max_err = rel_error(got, want), mean_err = mean_rel_error(got, want);
      EXPECT_LE(max_err, kFlashMaxTol);
      EXPECT_LE(mean_err, kFlashMeanTol);
      EXPECT_GT(rel_error(got, exact), 0.0) << "the tensor-core kernel did not run";
      EXPECT_EQ(rel_error(run(DType::kBF16, true, true, units), got), 0.0) << "a second run differs";
      std::printf("decode mma %-42s %d units a warp: max %.3g mean %.3g\n", c.name, units, max_err, mean_err);
    }
  }
}

// An AttentionArgs with compute = bf16 is checked like any other: a bad tensor is named.
TEST_F(FlashPrefill, InvalidArgumentNamesTheTensor) {
  KILN_CUDA_OR_SKIP(be);
  HostBatchLayout hl = shuffled_layout({0}, {100}, 2, 1);
  BatchLayout dl = make_batch_layout(hl, be->storage()).value();
  Twin q(*be, random_tensor({100, 16, 256}, 1));
  Twin out(*be, random_tensor({100, 16, 128}, 2));  // head_dim 128: wrong
  Twin kc(*be, random_tensor({2, 64, 4, 256}, 3));
  Twin vc(*be, random_tensor({2, 64, 4, 256}, 4));
  AttentionArgs a{q.dev, Tensor(), out.dev, kc.dev, vc.dev, &dl, 0.0625f};
  a.compute = DType::kBF16;
  Status s = be->attention().attend(a);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("'out'"), std::string::npos) << s.to_string();
}

// The request prints the compute dtype when it is not f32 (logs and declines name it).
TEST(FlashPrefillRequest, DescribeNamesTheComputeDtype) {
  AttentionRequest r;
  r.head_dim = 256;
  EXPECT_EQ(r.describe().find("compute="), std::string::npos) << r.describe();
  r.compute = DType::kBF16;
  EXPECT_NE(r.describe().find("compute=bf16"), std::string::npos) << r.describe();
}

}  // namespace
}  // namespace kiln
