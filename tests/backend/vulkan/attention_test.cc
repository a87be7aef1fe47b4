// Rope, K/V writes and paged attention against the CPU reference on the same random inputs: rope
// on strided q and k views of one qkv-like tensor (partial and full rotary, positions far past
// pi), K/V writes through non-contiguous blocks (bit-equal), and attention for prefill rows with
// past context, decode batches (short, and long enough to split the keys across workgroups), GQA
// and MHA, head_dim 256 and small or odd ones, gate on and off, blocks of 64, 48, 16 and 3, q and
// gate interleaved per head as the model's q_proj output. Tolerance max|got - want| / max|want| <= 2e-5.
#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "backend/batch_layout.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using Pair = testing::DevicePair;
using testing::host_i32;
using testing::random_tensor;
using testing::rel_error;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 2e-5;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

// ---------------------------------------------------------------- rope

TEST(VulkanAttention, RopeEqualsCpuOnStridedQkvViews) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t tokens, hq, hkv, d, rot;
    float theta;
    int32_t max_pos;
  } cases[] = {{5, 16, 4, 256, 64, 1e7f, 40000},  // the 4B model's attention: partial rotary
               {9, 2, 1, 32, 8, 1e4f, 300000},    // angles up to 3e5 radians
               {4, 4, 4, 64, 64, 1e4f, 4096}};    // full rotary, MHA
  uint32_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE(::testing::Message() << "tokens=" << c.tokens << " hq=" << c.hq << " d=" << c.d << " rot=" << c.rot);
    // One [tokens, q+gate | k | v] row a token: q heads 2*d apart (each followed by its gate).
    const int64_t q_width = c.hq * 2 * c.d, kv_width = c.hkv * c.d, width = q_width + 2 * kv_width;
    Pair qkv(*be, random_tensor({c.tokens, width}, seed++));
    Pair q = qkv.view(qkv.host_base.as_strided({c.tokens, c.hq, c.d}, {width, 2 * c.d, 1}));
    Pair k = qkv.view(qkv.host_base.as_strided({c.tokens, c.hkv, c.d}, {width, c.d, 1}, q_width));
    std::vector<int32_t> pos(c.tokens);
    std::mt19937 rng(seed++);
    for (auto& p : pos) p = static_cast<int32_t>(rng() % c.max_pos);
    pos[0] = c.max_pos - 1;
    Pair positions(*be, host_i32(pos));
    ASSERT_TRUE(ref->attention().rope({q.host, k.host, positions.host, c.rot, c.theta}).ok());
    Status s = be->attention().rope({q.dev, k.dev, positions.dev, c.rot, c.theta});
    ASSERT_TRUE(s.ok()) << s.to_string();
    // The whole buffer: the rotated dims, and everything else (gates, v, the unrotated dims) untouched.
    const double err = rel_error(qkv.dev_result(*be), qkv.host_base);
    EXPECT_LE(err, kF32Tol);
    std::printf("rope d=%lld rot=%lld: rel err %.3g\n", static_cast<long long>(c.d), static_cast<long long>(c.rot),
                err);
  }
}

TEST(VulkanAttention, RopeDeclinesAnOddRotaryDim) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor q = to_device(*be, random_tensor({2, 2, 16}, 1)), k = to_device(*be, random_tensor({2, 1, 16}, 2));
  Tensor pos = to_device(*be, host_i32({0, 1}));
  Status s = be->attention().rope({q, k, pos, 7, 1e4f});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("rope"), std::string::npos) << s.to_string();
}

// ---------------------------------------------------------------- layouts

// Rows continuing from `past` tokens with `n` new ones; K/V blocks drawn from a shuffled pool so
// that no row's blocks are contiguous.
struct Rows {
  std::vector<int64_t> past, n;
};

int64_t blocks_needed(const Rows& r, int64_t block_size) {
  int64_t b = 0;
  for (size_t i = 0; i < r.past.size(); ++i) b += (r.past[i] + r.n[i] + block_size - 1) / block_size;
  return b;
}

HostBatchLayout make_layout(const Rows& r, int64_t total_blocks, uint32_t seed, int block_size) {
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
    h.add_row(r.past[i], r.n[i], blocks, static_cast<int32_t>(i));
  }
  return h;
}

int64_t total_tokens(const Rows& r) { return std::accumulate(r.n.begin(), r.n.end(), int64_t{0}); }

// ---------------------------------------------------------------- K/V writes and attention

// Writes the new tokens' K/V (strided views of one [tokens, k | v] tensor) into random caches on
// both backends, checks the device caches bit-equal, then attends with q and gate interleaved per
// head and compares the output. Prefill rows of 8 tokens or more with head_dim 4..256 a power of
// two run attention_tiled.comp; the others attention.comp.
TEST(VulkanAttention, KvWriteAndAttendEqualCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    Rows rows;
    int64_t hq, hkv, d;
    bool gate;
    int block = 64;
  } cases[] = {
      {"prefill, 3 rows with past context, GQA 4, d 256", {{0, 70, 5}, {40, 30, 3}}, 8, 2, 256, true},
      {"prefill, 3 rows, GQA 4, d 32, no gate", {{0, 130, 64}, {100, 7, 65}}, 4, 1, 32, false},
      {"decode, 9 rows, GQA 2, d 64",
       {{0, 5, 63, 64, 65, 127, 200, 1, 33}, {1, 1, 1, 1, 1, 1, 1, 1, 1}}, 8, 4, 64, true},
      {"decode, long rows (split keys), GQA 4, d 128", {{1500, 9, 700}, {1, 1, 1}}, 8, 2, 128, true},
      {"decode, long row (split keys), MHA, d 16, no gate", {{2100}, {1}}, 2, 2, 16, false},
      {"mixed, MHA, d 48", {{5, 0, 64}, {1, 20, 3}}, 3, 3, 48, true},
      {"GQA 8 (two workgroups a K/V head), d 32", {{10, 0}, {2, 9}}, 16, 2, 32, true},
      {"prefill, blocks of 48, GQA 4, d 64", {{0, 50}, {100, 30}}, 8, 2, 64, true, 48},
      {"prefill, MHA (tiles of 32 tokens), d 64", {{3, 0}, {75, 9}}, 2, 2, 64, true},
      {"decode, blocks of 48 (split keys), d 32", {{0, 70, 1300}, {1, 1, 1}}, 4, 1, 32, true, 48},
      {"prefill, GQA 3, d 20, blocks of 3", {{7, 0}, {5, 11}}, 6, 2, 20, true, 3},
      {"decode, GQA 6 (3 heads a workgroup), d 132, blocks of 16", {{300, 40}, {1, 1}}, 6, 1, 132, false, 16},
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t T = total_tokens(c.rows), blocks = blocks_needed(c.rows, c.block) + 3;
    HostBatchLayout hl = make_layout(c.rows, blocks, seed++, c.block);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    // Random history everywhere; the new tokens are then written over their slots.
    Pair kc(*be, random_tensor({blocks, c.block, c.hkv, c.d}, seed++));
    Pair vc(*be, random_tensor({blocks, c.block, c.hkv, c.d}, seed++));
    const int64_t kv = c.hkv * c.d;
    Pair kvb(*be, random_tensor({T, 2 * kv}, seed++));
    Pair k = kvb.view(kvb.host_base.as_strided({T, c.hkv, c.d}, {2 * kv, c.d, 1}));
    Pair v = kvb.view(kvb.host_base.as_strided({T, c.hkv, c.d}, {2 * kv, c.d, 1}, kv));
    ASSERT_TRUE(ref->attention().write_kv({k.host, v.host, kc.host, vc.host, cl.slot_mapping}).ok());
    Status s = be->attention().write_kv({k.dev, v.dev, kc.dev, vc.dev, dl.slot_mapping});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(rel_error(kc.dev_result(*be), kc.host_base), 0.0);
    EXPECT_EQ(rel_error(vc.dev_result(*be), vc.host_base), 0.0);

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
    const double err = rel_error(out.dev_result(*be), out.host_base);
    EXPECT_LE(err, kF32Tol);
    std::printf("attention %s: rel err %.3g\n", c.name, err);
  }
}

TEST(VulkanAttention, KvWriteSkipsSlotsOutsideTheCache) {
  KILN_VULKAN_OR_SKIP(be);
  // Three tokens: the middle one's slot is -1 (padding), the last one's is past the cache. (The
  // CPU refuses such a mapping; the device skips those tokens rather than read the mapping back.)
  const int64_t blocks = 2, block = 4, hkv = 2, d = 8;
  Tensor cache = random_tensor({blocks, block, hkv, d}, 1);
  Tensor dk = to_device(*be, cache), dv = to_device(*be, cache);
  Tensor k = random_tensor({3, hkv, d}, 2);
  Tensor slots = host_i32({5, -1, static_cast<int32_t>(blocks * block)});
  Status s = be->attention().write_kv({to_device(*be, k), to_device(*be, k), dk, dv, to_device(*be, slots)});
  ASSERT_TRUE(s.ok()) << s.to_string();
  Tensor want = Tensor::empty(cache.shape(), DType::kF32);
  std::copy(cache.data<float>(), cache.data<float>() + cache.numel(), want.data<float>());
  std::copy(k.data<float>(), k.data<float>() + hkv * d, want.data<float>() + 5 * hkv * d);
  EXPECT_EQ(rel_error(to_host(*be, dk), want), 0.0);
  EXPECT_EQ(rel_error(to_host(*be, dv), want), 0.0);
}

TEST(VulkanAttention, Bf16CacheAndOddHeadDimsAreDeclinedNamingTheRequest) {
  KILN_VULKAN_OR_SKIP(be);
  HostBatchLayout hl = make_layout({{0}, {2}}, 1, 1, 64);
  BatchLayout l = make_batch_layout(hl, be->storage()).value();
  for (auto [kv, d] : {std::pair{DType::kBF16, int64_t{64}}, std::pair{DType::kF32, int64_t{512}},
                       std::pair{DType::kF32, int64_t{18}}}) {
    SCOPED_TRACE(::testing::Message() << dtype_name(kv) << " d=" << d);
    Tensor q = be->storage().allocate({2, 2, d}, DType::kF32).value();
    Tensor out = be->storage().allocate({2, 2, d}, DType::kF32).value();
    Tensor cache = be->storage().allocate({1, 64, 1, d}, kv).value();
    Status s = be->attention().attend({q, Tensor(), out, cache, cache, &l, 1.f});
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
    EXPECT_NE(s.message().find("vulkan"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("attention"), std::string::npos) << s.to_string();
    if (kv == DType::kBF16) {
      s = be->attention().write_kv({q.slice(1, 0, 1), q.slice(1, 0, 1), cache, cache, l.slot_mapping});
      EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
      EXPECT_NE(s.message().find("kv_write"), std::string::npos) << s.to_string();
    }
  }
}

}  // namespace
}  // namespace kiln
