// Each CUDA facet against the CPU reference backend on the same random inputs: tables of cases
// over the 4B shapes and tiny ones (GQA, head_dim 256, dk != dv), decode and prefill, several rows
// with non-contiguous K/V blocks, and the strided views the model passes. Tolerances, as
// max|cuda - cpu| / max|cpu|: 1e-2 for GEMMs on bf16/f16 weights (x is rounded to the weight
// dtype), 2e-5 for everything computed in f32.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"

namespace kiln {
namespace {

using testing::host_i32;
using testing::random_tensor;
using testing::rel_error;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 2e-5;
constexpr double kHalfTol = 1e-2;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

// A host buffer and its device twin, viewed alike.
struct Pair {
  Tensor host_base, dev_base, host, dev;
  Pair() = default;
  Pair(Backend& be, Tensor base) : host_base(base), dev_base(to_device(be, base)), host(base), dev(dev_base) {}
  Pair view(const Tensor& host_view) const {
    Pair p = *this;
    p.host = host_view;
    p.dev = same_view(dev_base, host_view, host_base);
    return p;
  }
  Tensor dev_result(Backend& be) const { return to_host(be, dev_base); }
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

TEST(CudaParity, MatmulAlgorithmCacheHitsOnRepeat) {
  KILN_CUDA_OR_SKIP(be);
  Tensor x = to_device(*be, random_tensor({4, 64}, 1));
  Tensor w = to_device(*be, random_tensor({32, 64}, 2, 0.1f, DType::kBF16));
  Tensor y = be->storage().allocate({4, 32}, DType::kF32).value();
  ASSERT_TRUE(be->linear().matmul({x, w, y}).ok());
  CudaBackendStats s0 = cuda_backend_stats(*be).value();
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(be->linear().matmul({x, w, y}).ok());
  CudaBackendStats s1 = cuda_backend_stats(*be).value();
  EXPECT_EQ(s1.matmul_cache_misses, s0.matmul_cache_misses);
  EXPECT_EQ(s1.matmul_cache_hits, s0.matmul_cache_hits + 3);
  EXPECT_GE(s1.matmul_cache_entries, 1u);
}

// ---------------------------------------------------------------- norm

TEST(CudaParity, RmsNorm) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    int64_t rows, width, row_stride;
  } cases[] = {{5, 64, 64}, {3, 2560, 2560}, {7 * 16, 256, 512}, {9, 128, 130}, {1, 2560, 2560}};
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

HostBatchLayout make_layout(const Rows& r, int64_t total_blocks, uint32_t seed) {
  std::vector<int32_t> pool(total_blocks);
  std::iota(pool.begin(), pool.end(), 0);
  std::shuffle(pool.begin(), pool.end(), std::mt19937(seed));
  HostBatchLayout h;
  h.block_size = 64;
  size_t next = 0;
  for (size_t i = 0; i < r.past.size(); ++i) {
    const int64_t need = (r.past[i] + r.n[i] + 63) / 64;
    std::vector<int32_t> blocks(pool.begin() + next, pool.begin() + next + need);
    next += need;
    h.add_row(r.past[i], r.n[i], blocks, static_cast<int32_t>(r.past.size() - 1 - i));  // slots reversed
  }
  return h;
}

int64_t total_tokens(const Rows& r) { return std::accumulate(r.n.begin(), r.n.end(), int64_t{0}); }

// ---------------------------------------------------------------- attention

TEST(CudaParity, KvWriteAndPagedAttention) {
  KILN_CUDA_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    Rows rows;
    int64_t hq, hkv, d;
    bool gate;
  } cases[] = {
      {"decode 4B", {{0, 70, 130}, {1, 1, 1}}, 16, 4, 256, true},
      {"prefill 4B", {{0, 65}, {100, 30}}, 16, 4, 256, true},
      {"prefill tiny", {{0}, {200}}, 2, 1, 32, true},
      {"mixed mha", {{5, 0, 64}, {1, 64, 3}}, 4, 4, 64, false},
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t T = total_tokens(c.rows), blocks = 16;
    HostBatchLayout hl = make_layout(c.rows, blocks, seed++);
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    // Random history everywhere; the new tokens are then written over their slots.
    Pair kc(*be, random_tensor({blocks, 64, c.hkv, c.d}, seed++));
    Pair vc(*be, random_tensor({blocks, 64, c.hkv, c.d}, seed++));
    Pair kb(*be, random_tensor({T, c.hkv * c.d}, seed++));
    Pair vb(*be, random_tensor({T, c.hkv * c.d}, seed++));
    Pair k = kb.view(kb.host_base.reshape({T, c.hkv, c.d}));
    Pair v = vb.view(vb.host_base.reshape({T, c.hkv, c.d}));
    ASSERT_TRUE(ref->attention().write_kv({k.host, v.host, kc.host, vc.host, cl.slot_mapping}).ok());
    Status s = be->attention().write_kv({k.dev, v.dev, kc.dev, vc.dev, dl.slot_mapping});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(rel_error(kc.dev_result(*be), kc.host_base), 0.0);
    EXPECT_EQ(rel_error(vc.dev_result(*be), vc.host_base), 0.0);

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
    std::printf("attention %s: rel err %.3g\n", c.name, err);
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
               {"mixed k5", {{0, 4}, {1, 40}}, 130, 5}};
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
    GdnForm cpu_form;  // the CUDA backend runs the recurrent kernel for both
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
  for (ElementwiseOp op : {ElementwiseOp::kAdd, ElementwiseOp::kSiluMul})
    for (int64_t width : {1, 100, 9216}) {
      SCOPED_TRACE(::testing::Message() << "op=" << int(op) << " width=" << width);
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

}  // namespace
}  // namespace kiln
