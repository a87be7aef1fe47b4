// The GDN layer's two sequence facets against the CPU reference: the causal conv1d (rows of
// different lengths, some shorter than the window, from nonzero states; a decode batch) and the
// gated delta rule (recurrent and chunked requests, several rows from nonzero states, k_heads <
// v_heads, dk != dv, head dims up to 256, rows longer than a stage of the shader's staged tokens,
// q/k/v as strided views of one projection row). Outputs
// and every state slot are compared, as max|got - want| / max|want|: 2e-5 for the same form as the
// CPU, 1e-4 against the CPU's chunked form (the Vulkan backend computes it token by token).
#include <gtest/gtest.h>

#include <numeric>

#include "backend/arg_checks.h"
#include "backend/batch_layout.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using Pair = testing::DevicePair;
using testing::random_tensor;
using testing::rel_error;
using testing::same_view;
using testing::to_device;
using testing::to_host;

constexpr double kF32Tol = 2e-5;
constexpr double kChunkedTol = 1e-4;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

// Rows of `n` new tokens each, continuing sequences of `past`; row i's state is in slot R-1-i, and
// slot R is in no row (it must come back unchanged).
struct Rows {
  std::vector<int64_t> past, n;
  int64_t count() const { return static_cast<int64_t>(n.size()); }
  int64_t tokens() const { return std::accumulate(n.begin(), n.end(), int64_t{0}); }
  HostBatchLayout layout() const {
    HostBatchLayout h;
    int32_t next = 0;
    for (size_t i = 0; i < n.size(); ++i) {
      std::vector<int32_t> blocks(static_cast<size_t>((past[i] + n[i]) / h.block_size + 1));
      std::iota(blocks.begin(), blocks.end(), next);
      next += static_cast<int32_t>(blocks.size());
      h.add_row(past[i], n[i], blocks, static_cast<int32_t>(n.size() - 1 - i));
    }
    return h;
  }
};

// ---------------------------------------------------------------- conv

TEST(VulkanConv, CausalConv1dEqualsCpu) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  struct Case {
    const char* name;
    Rows rows;
    int64_t channels, kernel;
  } cases[] = {{"prefill rows of 7, 2 and 20 tokens k4", {{0, 5, 9}, {7, 2, 20}}, 300, 4},
               {"decode batch k4", {{3, 9, 1, 40, 2}, {1, 1, 1, 1, 1}}, 2048, 4},
               {"one row k2", {{0}, {9}}, 96, 2},
               {"rows shorter than the window k8", {{0, 3, 9, 20}, {2, 1, 6, 33}}, 200, 8}};
  uint32_t seed = 100;
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const int64_t T = c.rows.tokens(), R = c.rows.count();
    const HostBatchLayout hl = c.rows.layout();
    BatchLayout cl = make_batch_layout(hl, ref->storage()).value();
    BatchLayout dl = make_batch_layout(hl, be->storage()).value();
    // x: a column range of a wider tensor (strided rows), as the conv reads the qkv projection.
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

TEST(VulkanConv, KernelPastTheWindowIsDeclinedNamingTheRequest) {
  KILN_VULKAN_OR_SKIP(be);
  const Rows rows{{0}, {3}};
  BatchLayout dl = make_batch_layout(rows.layout(), be->storage()).value();
  Tensor x = to_device(*be, random_tensor({3, 8}, 1)), w = to_device(*be, random_tensor({8, 17}, 2));
  Tensor st = to_device(*be, random_tensor({1, 16, 8}, 3)), out = be->storage().allocate({3, 8}, DType::kF32).value();
  Status s = be->conv().causal_conv1d({x, w, st, out, &dl});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("vulkan declined causal_conv1d"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("kernel=17"), std::string::npos) << s.to_string();
}

// ---------------------------------------------------------------- gdn

// The inputs of one delta-rule call: q, k, v as views into one conv-output row (as in the model),
// a and b as the two halves of one [T, 2 Hv] projection, parameters, a nonzero state pool.
struct GdnInputs {
  Pair mixed, q, k, v, ab, a, b, a_log, dt_bias, state, out;
  GdnInputs(Backend& be, int64_t T, int64_t R, int64_t hk, int64_t hv, int64_t dk, int64_t dv, uint32_t seed) {
    const int64_t C = 2 * hk * dk + hv * dv;
    mixed = Pair(be, random_tensor({T, C}, seed++));
    q = mixed.view(mixed.host_base.as_strided({T, hk, dk}, {C, dk, 1}));
    k = mixed.view(mixed.host_base.as_strided({T, hk, dk}, {C, dk, 1}, hk * dk));
    v = mixed.view(mixed.host_base.as_strided({T, hv, dv}, {C, dv, 1}, 2 * hk * dk));
    ab = Pair(be, random_tensor({T, 2 * hv}, seed++));
    a = ab.view(ab.host_base.as_strided({T, hv}, {2 * hv, 1}));
    b = ab.view(ab.host_base.as_strided({T, hv}, {2 * hv, 1}, hv));
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

struct GdnCase {
  const char* name;
  Rows rows;
  int64_t hk, hv, dk, dv;
};

// Runs `form` on both backends from the same inputs; the errors of the output and the state pool.
void run_gdn(Backend& be, Backend& ref, const GdnCase& c, GdnForm form, int chunk, uint32_t seed, double tol) {
  SCOPED_TRACE(c.name);
  const int64_t T = c.rows.tokens(), R = c.rows.count();
  const HostBatchLayout hl = c.rows.layout();
  BatchLayout cl = make_batch_layout(hl, ref.storage()).value();
  BatchLayout dl = make_batch_layout(hl, be.storage()).value();
  GdnInputs in(be, T, R, c.hk, c.hv, c.dk, c.dv, seed);
  const GdnArgs da = in.args(false, form, chunk, &dl);
  const Support sup = be.gdn().supports(describe(da));
  EXPECT_EQ(sup.state, form == GdnForm::kChunked ? SupportState::kNativeWithConstraints : SupportState::kNative)
      << sup.constraint;
  ASSERT_TRUE(ref.gdn().delta_rule(in.args(true, form, chunk, &cl)).ok());
  Status s = be.gdn().delta_rule(da);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const double eo = rel_error(in.out.dev_result(be), in.out.host_base);
  const double es = rel_error(in.state.dev_result(be), in.state.host_base);
  EXPECT_LE(eo, tol);
  EXPECT_LE(es, tol);
  std::printf("gdn %s %s: out rel err %.3g, state rel err %.3g\n", form == GdnForm::kChunked ? "chunked" : "recurrent",
              c.name, eo, es);
}

TEST(VulkanGdn, RecurrentEqualsCpuRecurrent) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  const GdnCase cases[] = {
      {"decode batch dk 32 dv 24", {{5, 0, 12, 3}, {1, 1, 1, 1}}, 2, 4, 32, 24},
      {"prefill rows of 9, 3, 1 and 17 tokens dk 16 dv 40", {{0, 4, 7, 2}, {9, 3, 1, 17}}, 1, 3, 16, 40},
      {"4B heads dk 128 dv 128", {{0, 30}, {6, 1}}, 2, 4, 128, 128},
      {"dk 256 dv 64", {{0}, {5}}, 1, 2, 256, 64},
      {"dk 64 dv 256", {{3, 0}, {1, 4}}, 1, 1, 64, 256},
      {"dk 65 dv 20 (columns split unevenly)", {{0, 1}, {5, 2}}, 1, 2, 65, 20},
      // Rows past one stage of staged tokens (at most 32 a stage), beside a decode row.
      {"4B heads, rows of 70 and 1 tokens", {{0, 5}, {70, 1}}, 2, 4, 128, 128},
      {"dk 256 dv 64, a row of 45 tokens", {{3}, {45}}, 1, 2, 256, 64},
  };
  uint32_t seed = 200;
  for (const auto& c : cases) {
    run_gdn(*be, *ref, c, GdnForm::kRecurrent, 64, seed, kF32Tol);
    seed += 20;
  }
}

TEST(VulkanGdn, ChunkedRequestEqualsCpuChunked) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  // Rows across chunk boundaries (chunks of 16), a one-token row inside the prefill batch.
  const GdnCase cases[] = {
      {"3 rows dk 32 dv 16", {{0, 8, 0}, {40, 1, 17}}, 2, 4, 32, 16},
      {"ratio 1 dk 16 dv 48", {{0, 2}, {33, 16}}, 3, 3, 16, 48},
  };
  uint32_t seed = 300;
  for (const auto& c : cases) {
    run_gdn(*be, *ref, c, GdnForm::kChunked, 16, seed, kChunkedTol);
    seed += 20;
  }
}

// A row whose slot is outside the pool is left alone (its output and every slot unwritten), as
// on CUDA: the slots live on the device, so the host cannot check them without a read-back.
TEST(VulkanGdn, SlotOutsideThePoolLeavesTheRowUntouched) {
  KILN_VULKAN_OR_SKIP(be);
  HostBatchLayout hl = Rows{{0}, {3}}.layout();
  hl.state_slots[0] = 7;
  BatchLayout dl = make_batch_layout(hl, be->storage()).value();
  GdnInputs in(*be, 3, 1, 1, 2, 16, 8, 400);
  ASSERT_TRUE(be->gdn().delta_rule(in.args(false, GdnForm::kRecurrent, 64, &dl)).ok());
  EXPECT_EQ(rel_error(in.state.dev_result(*be), in.state.host_base), 0.0);
  EXPECT_EQ(rel_error(in.out.dev_result(*be), in.out.host_base), 0.0);
}

TEST(VulkanGdn, HeadsPastWhatItHoldsAreDeclinedNamingTheRequest) {
  KILN_VULKAN_OR_SKIP(be);
  BatchLayout dl = make_batch_layout(Rows{{0}, {2}}.layout(), be->storage()).value();
  for (auto [dk, dv] : {std::pair{512, 16}, std::pair{16, 512}}) {
    GdnInputs in(*be, 2, 1, 1, 1, dk, dv, 500);
    Status s = be->gdn().delta_rule(in.args(false, GdnForm::kRecurrent, 64, &dl));
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
    EXPECT_NE(s.message().find("vulkan declined gdn"), std::string::npos) << s.to_string();
    EXPECT_NE(s.message().find("dk=" + std::to_string(dk)), std::string::npos) << s.to_string();
  }
  // q's and k's head strides travel in 16 bits: a head-major q past that is refused, not misread.
  {
    GdnInputs in(*be, 2, 1, 2, 2, 16, 8, 600);
    Tensor wide = to_device(*be, random_tensor({70000 + 32}, 601));
    GdnArgs g = in.args(false, GdnForm::kRecurrent, 64, &dl);
    g.q = wide.as_strided({2, 2, 16}, {16, 70000, 1});
    Status s = be->gdn().delta_rule(g);
    EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
    EXPECT_NE(s.message().find("head strides"), std::string::npos) << s.to_string();
  }
  GdnRequest r;
  r.rows = r.tokens = 1;
  r.k_heads = 2;
  r.v_heads = 3;
  r.dk = r.dv = 16;
  EXPECT_EQ(be->gdn().supports(r).state, SupportState::kDeclined);  // v_heads not a multiple of k_heads
  r.v_heads = 4;
  r.state_dtype = DType::kBF16;
  EXPECT_EQ(be->gdn().supports(r).state, SupportState::kDeclined);
}

}  // namespace
}  // namespace kiln
