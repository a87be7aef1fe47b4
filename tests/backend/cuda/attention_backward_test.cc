// The CUDA attention backward against the CPU reference (itself checked against finite
// differences in tests/train/training_ops_test.cc) on the same random inputs, strided the way
// the LoRA trainer passes them: q and gate interleaved per head in one [T, Hq * 2D] buffer (dq
// and dgate likewise), k and dk views of wider rows. Shapes: the 4B attention (16 q heads, 4 kv
// heads, head_dim 256) over one, two and three ragged rows, MHA, ratios 2 and 3, an odd head_dim,
// each with and without the gate; and rows long enough that the op splits its scores into
// chunks (each of the three ways). dq, dk, dv and dgate are compared one by one, then the
// whole output buffers (what the op must not touch stays as it was).
// Tolerances, as max|cuda - cpu| / max|cpu|: 2e-5 where both sides sum at most a few hundred f32
// terms per output, in different orders (cuBLAS blocks its sums, the CPU runs them in sequence);
// 1e-4 for the chunked rows, whose sums run over up to 8200 keys or queries. A request that
// allows bf16 products (compute = bf16) runs its GEMMs on TF32 tensor cores: each operand rounded
// to 11 significant bits (unit roundoff 2^-11 = 4.9e-4), through the chain S, P, dP, dS, dQ/dK;
// 5e-3 holds that, and the error must exceed the f32 bound (the TF32 path ran). Given also the
// forward's output and log-sum-exps (flash_prefill, AttentionArgs::kept), such a request runs in
// flash form on bf16 tensor cores: Q, K, V, dO, P and dS rounded to 8 significant bits (unit
// roundoff 2^-9 = 2e-3) with f32 accumulation, on top of the forward's own bf16 rounding in the
// output and log-sum-exps it starts from; 1e-2 holds that (2e-3 .. 4e-3 measured on the H200),
// and again the error must exceed the f32 bound.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/tuning.h"

namespace kiln {
namespace {

using Pair = testing::DevicePair;
using testing::random_tensor;
using testing::rel_error;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 2e-5;
constexpr double kLongTol = 1e-4;
constexpr double kTf32Tol = 5e-3;
constexpr double kFlashTol = 1e-2;

// How the device computes: f32 products, TF32 GEMMs (compute = bf16), or the flash form
// (compute = bf16, with the forward's output and log-sum-exps from a bf16 attend on the device).
enum class Products { kF32, kTf32, kFlash };

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

// A contiguous copy of a strided host [T, H, D] view.
Tensor packed(const Tensor& v) {
  Tensor out = Tensor::empty({v.dim(0), v.dim(1), v.dim(2)}, DType::kF32);
  float* o = out.data<float>();
  for (int64_t t = 0; t < v.dim(0); ++t)
    for (int64_t h = 0; h < v.dim(1); ++h)
      for (int64_t e = 0; e < v.dim(2); ++e)
        *o++ = v.data<float>()[t * v.stride(0) + h * v.stride(1) + e * v.stride(2)];
  return out;
}

// Rows from position 0, their K/V blocks numbered in turn (read only by the flash form's forward:
// the backward's K/V are dense).
HostBatchLayout rows_from_zero(const std::vector<int64_t>& lens) {
  HostBatchLayout h;
  int32_t next = 0;
  for (int64_t n : lens) {
    std::vector<int32_t> blocks(static_cast<size_t>((n + h.block_size - 1) / h.block_size));
    std::iota(blocks.begin(), blocks.end(), next);
    next += static_cast<int32_t>(blocks.size());
    h.add_row(0, n, blocks, 0);
  }
  return h;
}

struct Case {
  const char* name;
  std::vector<int64_t> rows;
  int64_t hq, hkv, d;
};

// Runs one case on both backends and compares every gradient. host_offsets false: the device
// layout carries no host copy of its row offsets, so the op reads them back from the device.
// k_pad: the floats past each token's K (3: k's rows not 16-byte aligned, as dk's never are).
void check_case(Backend& be, Backend& ref, const Case& c, bool gated, double tol, uint32_t seed,
                bool host_offsets = true, Products products = Products::kF32, double* worst = nullptr,
                int64_t k_pad = 3) {
  SCOPED_TRACE(::testing::Message() << c.name << (gated ? " gated" : " ungated")
                                    << (host_offsets ? "" : ", offsets read back"));
  const int64_t T = std::accumulate(c.rows.begin(), c.rows.end(), int64_t{0});
  const int64_t Hq = c.hq, Hkv = c.hkv, D = c.d, per_head = gated ? 2 * D : D, qrow = Hq * per_head;
  const HostBatchLayout hl = rows_from_zero(c.rows);
  BatchLayout cl = make_batch_layout(hl, ref.storage()).value();
  BatchLayout dl = make_batch_layout(hl, be.storage()).value();
  if (!host_offsets) dl.host_cu_seqlens.clear();
  Pair qg(be, random_tensor({T, qrow}, seed++));
  Pair kb(be, random_tensor({T, Hkv * D + k_pad}, seed++));
  Pair v(be, random_tensor({T, Hkv, D}, seed++));
  Pair dout(be, random_tensor({T, Hq, D}, seed++));
  // The outputs start random: the op overwrites them.
  Pair dqg(be, random_tensor({T, qrow}, seed++));
  Pair dkb(be, random_tensor({T, Hkv * D + 5}, seed++));
  Pair dv(be, random_tensor({T, Hkv, D}, seed++));
  auto heads = [&](const Pair& p, int64_t h, int64_t ts, int64_t hs, int64_t off) {
    return p.view(p.host_base.as_strided({T, h, D}, {ts, hs, 1}, off));
  };
  const Pair q = heads(qg, Hq, qrow, per_head, 0), dq = heads(dqg, Hq, qrow, per_head, 0);
  const Pair k = heads(kb, Hkv, Hkv * D + k_pad, D, 0), dk = heads(dkb, Hkv, Hkv * D + 5, D, 0);
  Pair gate, dgate;
  if (gated) gate = heads(qg, Hq, qrow, per_head, D), dgate = heads(dqg, Hq, qrow, per_head, D);
  const float scale = 1.f / std::sqrt(static_cast<float>(D));

  AttentionBackwardArgs ha{q.host, k.host, v.host, gate.host, dout.host, dq.host, dk.host, dv.host, dgate.host,
                           &cl, scale};
  AttentionBackwardArgs da{q.dev, k.dev, v.dev, gate.dev, dout.dev, dq.dev, dk.dev, dv.dev, dgate.dev, &dl, scale};
  if (products != Products::kF32) da.compute = DType::kBF16;
  if (products == Products::kFlash) {  // the forward on the device: K/V into a cache, then attend
    int64_t blocks = 0;
    for (const auto& b : hl.block_tables) blocks += static_cast<int64_t>(b.size());
    Tensor kc = to_device(be, random_tensor({blocks, hl.block_size, Hkv, D}, seed++));
    Tensor vc = to_device(be, random_tensor({blocks, hl.block_size, Hkv, D}, seed++));
    const Status w = be.attention().write_kv({k.dev, v.dev, kc, vc, dl.slot_mapping});
    ASSERT_TRUE(w.ok()) << w.to_string();
    Tensor y = to_device(be, random_tensor({T, Hq, D}, seed++)), kept;
    AttentionArgs fa{q.dev, gate.dev, y, kc, vc, &dl, scale};
    fa.compute = DType::kBF16;
    fa.kept = &kept;
    const Status f = be.attention().attend(fa);
    ASSERT_TRUE(f.ok()) << f.to_string();
    ASSERT_TRUE(kept.defined()) << "the forward kept no log-sum-exps (not the flash prefill?)";
    da.out = y;
    da.kept = kept;
  }
  const Status rs = ref.training().attention_backward(ha);
  ASSERT_TRUE(rs.ok()) << rs.to_string();
  const Status ds = be.training().attention_backward(da);
  ASSERT_TRUE(ds.ok()) << ds.to_string();

  const Tensor dqg_got = to_host(be, dqg.dev_base), dkb_got = to_host(be, dkb.dev_base);
  const Tensor dv_got = to_host(be, dv.dev_base);
  auto got = [](const Tensor& base_got, const Pair& p) { return packed(same_view(base_got, p.host, p.host_base)); };
  // dq and dk vanish where every row is one token long (the softmax of one key has no gradient):
  // there they are compared on dv's scale, the gradient magnitude of the same call.
  const Tensor dv_want = packed(dv.host);
  double dv_scale = 0;
  for (int64_t i = 0; i < dv_want.numel(); ++i) dv_scale = std::max(dv_scale, std::fabs(double(dv_want.data<float>()[i])));
  auto err = [&](const Tensor& g, const Tensor& w) {
    double scale = dv_scale;
    for (int64_t i = 0; i < w.numel(); ++i) scale = std::max(scale, std::fabs(double(w.data<float>()[i])));
    return testing::max_abs_diff(g.data<float>(), w.data<float>(), w.numel()) / scale;
  };
  EXPECT_LT(err(got(dqg_got, dq), packed(dq.host)), tol) << "dq";
  EXPECT_LT(err(got(dkb_got, dk), packed(dk.host)), tol) << "dk";
  EXPECT_LT(rel_error(dv_got, dv.host_base), tol) << "dv";
  if (gated) {
    EXPECT_LT(rel_error(got(dqg_got, dgate), packed(dgate.host)), tol) << "dgate";
  }
  // The whole buffers: dk's padding columns keep their random values on both sides.
  const double e_q = err(dqg_got, dqg.host_base), e_k = err(dkb_got, dkb.host_base);
  const double e_v = rel_error(dv_got, dv.host_base);
  EXPECT_LT(e_q, tol) << "the dq/dgate buffer";
  EXPECT_LT(e_k, tol) << "the dk buffer";
  if (worst != nullptr) *worst = std::max({e_q, e_k, e_v});
}

TEST(CudaAttentionBackward, MatchesCpu) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const Case cases[] = {
      {"4B, one row of 300", {300}, 16, 4, 256},
      {"4B, rows of 1 and 130", {1, 130}, 16, 4, 256},
      {"4B, ragged rows of 7, 64 and 300", {7, 64, 300}, 16, 4, 256},
      {"4B, single-token rows", {1, 1, 1}, 16, 4, 256},
      {"MHA", {5, 33, 1}, 4, 4, 64},
      {"ratio 2", {17, 9, 40}, 4, 2, 32},
      {"ratio 3, head_dim 40", {12, 3}, 3, 1, 40},
  };
  uint32_t seed = 100;
  for (const Case& c : cases)
    for (bool gated : {true, false}) {
      check_case(*be, *ref, c, gated, kF32Tol, seed);
      seed += 10;
    }
  check_case(*be, *ref, cases[2], true, kF32Tol, seed, /*host_offsets=*/false);
}

// compute = bf16 (a bf16 checkpoint's training): the GEMMs on TF32 tensor cores.
TEST(CudaAttentionBackward, Tf32WhereBf16ProductsAreAllowed) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const Case cases[] = {
      {"4B, ragged rows of 7, 64 and 300", {7, 64, 300}, 16, 4, 256},
      {"ratio 2", {17, 9, 40}, 4, 2, 32},
  };
  uint32_t seed = 300;
  for (const Case& c : cases) {
    double worst = 0;
    check_case(*be, *ref, c, true, kTf32Tol, seed, true, Products::kTf32, &worst);
    EXPECT_GT(worst, kF32Tol) << c.name << ": no TF32 rounding to be seen";
    std::printf("attention backward, TF32 products: %s: max rel err %.3g\n", c.name, worst);
    seed += 10;
  }
}

// compute = bf16 with the forward's output and log-sum-exps: the flash form (flash_backward.cu),
// on the head_dims it has (128, 256), rows shorter and longer than its 64-token tiles. The gated
// cases have K rows 16-byte aligned, as the trainer's are (its first step then reads four floats
// an access), the others not (one float an access). Every case runs twice: dQ from the dS tiles
// the dK/dV kernel keeps (the default), and with no budget for them (S and dP again).
TEST(CudaAttentionBackward, FlashFormFromTheForwardsLogSumExps) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const long long saved_ds_mb = cuda::tuning().flash_backward_ds_mb;
  const Case cases[] = {
      {"4B, ragged rows of 7, 64 and 300", {7, 64, 300}, 16, 4, 256},
      {"4B, one row of 129", {129}, 16, 4, 256},
      {"head_dim 128, ratio 2", {65, 200}, 8, 4, 128},
      {"MHA, head_dim 128", {100, 1}, 4, 4, 128},
  };
  for (long long ds_mb : {saved_ds_mb, 0LL}) {
    cuda::tuning().flash_backward_ds_mb = ds_mb;
    uint32_t seed = 700;
    for (const Case& c : cases)
      for (bool gated : {true, false}) {
        double worst = 0;
        check_case(*be, *ref, c, gated, kFlashTol, seed, true, Products::kFlash, &worst, gated ? 4 : 3);
        EXPECT_GT(worst, kF32Tol) << c.name << ": no bf16 rounding to be seen";
        std::printf("attention backward, flash form, dQ %s: %s%s: max rel err %.3g\n",
                    ds_mb > 0 ? "from kept dS" : "recomputing S and dP", c.name, gated ? " gated" : "", worst);
        seed += 10;
      }
  }
  cuda::tuning().flash_backward_ds_mb = saved_ds_mb;
}

// The op bounds each score buffer at 2^26 floats (training_attention.cc's kScoreBudget) and
// splits a row that exceeds it: into groups of kv heads, then of query heads within a group, then
// into blocks of query positions. One row per way; dK and dV then accumulate over the chunks.
TEST(CudaAttentionBackward, LongRowsSplitIntoChunksMatchCpu) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  const Case cases[] = {
      {"kv heads 3 + 1 (16 * 2100^2 > 2^26 >= 4 * 2100^2)", {2100}, 16, 4, 8},
      {"query heads 3 + 1 of a group of 4 (4 * 4100^2 > 2^26 >= 4100^2)", {5, 4100}, 4, 1, 8},
      {"query positions 8183 + 17 (8200^2 > 2^26)", {8200}, 1, 1, 4},
  };
  uint32_t seed = 500;
  for (const Case& c : cases) {
    check_case(*be, *ref, c, true, kLongTol, seed);
    seed += 10;
  }
}

AttentionBackwardArgs small_args(Backend& be, const BatchLayout& layout, int64_t hq, int64_t hkv, int64_t dv_dim) {
  const int64_t T = layout.tokens, D = 8;
  AttentionBackwardArgs a;
  a.q = to_device(be, random_tensor({T, hq, D}, 1));
  a.k = to_device(be, random_tensor({T, hkv, D}, 2));
  a.v = to_device(be, random_tensor({T, hkv, D}, 3));
  a.dout = to_device(be, random_tensor({T, hq, D}, 4));
  a.dq = to_device(be, random_tensor({T, hq, D}, 5));
  a.dk = to_device(be, random_tensor({T, hkv, D}, 6));
  a.dv = to_device(be, random_tensor({T, hkv, dv_dim}, 7));
  a.layout = &layout;
  return a;
}

TEST(CudaAttentionBackward, DeclinesAndInvalidArgumentsNameTheirReason) {
  KILN_CUDA_OR_SKIP(be);
  BatchLayout layout = make_batch_layout(rows_from_zero({3, 2}), be->storage()).value();
  const Status declined = be->training().attention_backward(small_args(*be, layout, 3, 2, 8));
  EXPECT_EQ(declined.code(), ErrorCode::kUnsupported) << declined.to_string();
  EXPECT_NE(declined.message().find("q_heads must be a multiple of kv_heads"), std::string::npos)
      << declined.to_string();
  const Status invalid = be->training().attention_backward(small_args(*be, layout, 4, 2, 9));
  EXPECT_EQ(invalid.code(), ErrorCode::kInvalidArgument) << invalid.to_string();
  EXPECT_NE(invalid.message().find("'dv'"), std::string::npos) << invalid.to_string();
  AttentionBackwardArgs lone = small_args(*be, layout, 4, 2, 8);
  lone.kept = to_device(*be, random_tensor({layout.tokens, 4}, 8));  // without the forward's output
  const Status half = be->training().attention_backward(lone);
  EXPECT_EQ(half.code(), ErrorCode::kInvalidArgument) << half.to_string();
  EXPECT_NE(half.message().find("'out' and 'kept' come together"), std::string::npos) << half.to_string();
}

TEST(CudaAttentionBackward, PredicateDeclinesWhatItCannotRun) {
  KILN_CUDA_OR_SKIP(be);
  const TrainingFacet& t = be->training();
  TrainRequest r;
  r.op = TrainOp::kAttentionBackward;
  r.rows = 3, r.tokens = 371, r.q_heads = 16, r.kv_heads = 4, r.head_dim = 256;
  EXPECT_TRUE(t.supports(r).runs_natively());
  TrainRequest ratio = r;
  ratio.kv_heads = 3;
  EXPECT_EQ(t.supports(ratio).constraint, "q_heads must be a multiple of kv_heads");
  TrainRequest bf16 = r;
  bf16.dtype = DType::kBF16;
  EXPECT_EQ(t.supports(bf16).constraint, "activations must be f32");
  TrainRequest empty = r;
  empty.tokens = 0;
  EXPECT_EQ(t.supports(empty).constraint, "sizes must be positive");
}

}  // namespace
}  // namespace kiln
