// The CPU training facet's ops (backend/cpu/training_*.cc) against independent references:
// gemm against a double-precision loop; the norm, silu-mul and attention backward against central
// finite differences of double-precision re-implementations of their forwards (written here from
// docs/model.md); the RoPE backward as the transpose of the forward facet's rotation;
// token log-probabilities against a full softmax in double, and their backward against finite
// differences of that. Shapes are small, with GQA, several rows and strided inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "backend/registry.h"
#include "backend/training_facets.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;

struct Cpu {
  std::unique_ptr<Backend> backend = std::move(create_backend("cpu").value());
  TrainingFacet& t() { return backend->training(); }
};

std::vector<double> to_double(const Tensor& t) {  // logical row-major order; bf16/f16 contiguous only
  std::vector<double> out;
  if (t.dtype() != DType::kF32) {
    for (int64_t n = 0; n < t.numel(); ++n) out.push_back(testing::value_at(t, n));
    return out;
  }
  std::vector<int64_t> idx(t.rank(), 0);
  for (int64_t n = 0; n < t.numel(); ++n) {
    int64_t off = 0;
    for (int d = 0; d < t.rank(); ++d) off += idx[d] * t.stride(d);
    out.push_back(t.data<float>()[off]);
    for (int d = t.rank() - 1; d >= 0; --d) {
      if (++idx[d] < t.dim(d)) break;
      idx[d] = 0;
    }
  }
  return out;
}

// Element n (logical row-major order) of a strided f32 tensor.
float& at(const Tensor& t, int64_t n) {
  int64_t off = 0;
  for (int d = t.rank() - 1; d >= 0; --d) {
    off += (n % t.dim(d)) * t.stride(d);
    n /= t.dim(d);
  }
  return t.data<float>()[off];
}

// max |got - want| / max(max |want|, floor): the error measure of every comparison here.
double rel_err(const std::vector<double>& got, const std::vector<double>& want, double floor = 1e-6) {
  double m = 0, s = floor;
  for (size_t i = 0; i < want.size(); ++i) s = std::max(s, std::fabs(want[i]));
  for (size_t i = 0; i < want.size(); ++i) m = std::max(m, std::fabs(got[i] - want[i]));
  return got.size() == want.size() ? m / s : INFINITY;
}

// Central differences of a scalar function of the elements of `x` (f32 storage, perturbed in
// place, evaluated in double): d f / d x[n] for every n.
std::vector<double> finite_diff(const Tensor& x, const std::function<double()>& f, double h = 1e-3) {
  std::vector<double> g;
  for (int64_t n = 0; n < x.numel(); ++n) {
    float& v = at(x, n);
    const float keep = v;
    v = static_cast<float>(keep + h);
    const double up = f();
    v = static_cast<float>(keep - h);
    const double down = f();
    v = keep;
    g.push_back((up - down) / (static_cast<double>(static_cast<float>(keep + h)) - static_cast<float>(keep - h)));
  }
  return g;
}

// A [rows, width] view with rows `stride` apart inside a larger buffer (the strided case).
Tensor strided(int64_t rows, int64_t width, int64_t stride, uint32_t seed, float scale = 1.f) {
  Tensor buf = random_tensor({rows, stride}, seed, scale);
  return buf.as_strided({rows, width}, {stride, 1}, 1);
}

// ---------------------------------------------------------------------------------------------

TEST(TrainingOps, GemmMatchesDoubleForEveryTransposeAndDtype) {
  Cpu cpu;
  constexpr double kTol = 2e-6;  // f32 sgemm (bf16/f16 weights are exact in f32) against double; seen 2.5e-7
  for (DType bt : {DType::kF32, DType::kBF16, DType::kF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool acc : {false, true}) {
          const int64_t M = 70, N = 130, K = 33;  // N spans three 64-column weight tiles
          Tensor a = ta ? strided(K, M, M + 3, 1) : strided(M, K, K + 5, 1);
          Tensor b = tb ? random_tensor({N, K}, 2, 1.f, bt) : random_tensor({K, N}, 2, 1.f, bt);
          Tensor out = strided(M, N, N + 2, 3);
          const std::vector<double> A = to_double(a), B = to_double(b), O = to_double(out);
          GemmArgs g{a, b, out, ta, tb, 0.5f, acc};
          ASSERT_TRUE(cpu.t().gemm(g).ok());
          std::vector<double> want(M * N);
          for (int64_t m = 0; m < M; ++m)
            for (int64_t n = 0; n < N; ++n) {
              double s = 0;
              for (int64_t k = 0; k < K; ++k) s += A[ta ? k * M + m : m * K + k] * B[tb ? n * K + k : k * N + n];
              want[m * N + n] = 0.5 * s + (acc ? O[m * N + n] : 0.0);
            }
          EXPECT_LT(rel_err(to_double(out), want), kTol) << dtype_name(bt) << " ta " << ta << " tb " << tb;
        }
}

// The double forward of NormFacet::rms_norm (spec: y = x rsqrt(mean x^2 + eps) w', w' = 1 + w,
// w, or w silu(z)), summed against fixed weights `c`: its gradient is the backward's output.
double norm_loss(NormKind kind, const Tensor& x, const Tensor& w, const Tensor& z, const std::vector<double>& c,
                 double eps) {
  const int64_t R = x.dim(0), W = x.dim(1);
  const std::vector<double> X = to_double(x), Wt = to_double(w), Z = z.defined() ? to_double(z) : std::vector<double>();
  double loss = 0;
  for (int64_t i = 0; i < R; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < W; ++j) ss += X[i * W + j] * X[i * W + j];
    const double inv = 1 / std::sqrt(ss / W + eps);
    for (int64_t j = 0; j < W; ++j) {
      double y = X[i * W + j] * inv;
      if (kind == NormKind::kOnePlus) y *= 1 + Wt[j];
      else y *= Wt[j];
      if (kind == NormKind::kGated) y *= Z[i * W + j] / (1 + std::exp(-Z[i * W + j]));
      loss += c[i * W + j] * y;
    }
  }
  return loss;
}

TEST(TrainingOps, NormBackwardMatchesFiniteDifferencesForEveryKind) {
  Cpu cpu;
  constexpr double kTol = 2e-5;  // f32 analytic against central differences (h 1e-3) of the double forward; seen 1.4e-7
  const int64_t R = 5, W = 24;
  for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated}) {
    Tensor x = strided(R, W, W + 8, 11);
    Tensor w = random_tensor({W}, 12, 0.3f);
    Tensor z = kind == NormKind::kGated ? strided(R, W, W + 3, 13) : Tensor();
    Tensor dout = random_tensor({R, W}, 14);
    const std::vector<double> c = to_double(dout);
    Tensor dx = strided(R, W, W + 1, 15), dgate = kind == NormKind::kGated ? random_tensor({R, W}, 16) : Tensor();
    NormBackwardArgs a;
    a.kind = kind, a.x = x, a.weight = w, a.gate = z, a.dout = dout, a.dx = dx, a.dgate = dgate;
    ASSERT_TRUE(cpu.t().norm_backward(a).ok());
    auto f = [&] { return norm_loss(kind, x, w, z, c, 1e-6); };
    EXPECT_LT(rel_err(to_double(dx), finite_diff(x, f)), kTol) << int(kind);
    if (kind == NormKind::kGated) {
      EXPECT_LT(rel_err(to_double(dgate), finite_diff(z, f)), kTol);
    }
    // accumulate adds onto what dx holds.
    const std::vector<double> once = to_double(dx);
    a.accumulate = true;
    ASSERT_TRUE(cpu.t().norm_backward(a).ok());
    std::vector<double> twice = once;
    for (double& v : twice) v *= 2;
    EXPECT_LT(rel_err(to_double(dx), twice), 1e-6);
  }
}

TEST(TrainingOps, SiluMulBackwardMatchesFiniteDifferences) {
  Cpu cpu;
  constexpr double kTol = 2e-5;  // seen 1.4e-7
  const int64_t R = 4, W = 19;
  Tensor a = strided(R, W, 32, 21, 2.f), b = strided(R, W, 20, 22), dout = random_tensor({R, W}, 23);
  Tensor da = random_tensor({R, W}, 24), db = random_tensor({R, W}, 25);
  ASSERT_TRUE(cpu.t().silu_mul_backward({a, b, dout, da, db}).ok());
  const std::vector<double> c = to_double(dout);
  auto f = [&] {
    const std::vector<double> A = to_double(a), B = to_double(b);
    double s = 0;
    for (size_t i = 0; i < A.size(); ++i) s += c[i] * A[i] / (1 + std::exp(-A[i])) * B[i];
    return s;
  };
  EXPECT_LT(rel_err(to_double(da), finite_diff(a, f)), kTol);
  EXPECT_LT(rel_err(to_double(db), finite_diff(b, f)), kTol);
}

// The rotation is linear, so its backward is its transpose: <rope(x), g> = <x, rope_backward(g)>
// for the forward facet's rope, and applying both gives x back.
TEST(TrainingOps, RopeBackwardIsTheTransposeOfTheForwardRotation) {
  Cpu cpu;
  const int64_t T = 7, Hq = 4, Hkv = 2, D = 16, rotary = 8;
  std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 40};
  Tensor positions = Tensor::from_values(pos, {T});
  Tensor q = random_tensor({T, Hq, 2 * D}, 31).as_strided({T, Hq, D}, {Hq * 2 * D, 2 * D, 1});  // gate interleaved
  Tensor k = random_tensor({T, Hkv, D}, 32);
  Tensor gq = random_tensor({T, Hq, D}, 33), gk = random_tensor({T, Hkv, D}, 34);
  const std::vector<double> q0 = to_double(q), k0 = to_double(k), gq0 = to_double(gq), gk0 = to_double(gk);
  ASSERT_TRUE(cpu.backend->attention().rope({q, k, positions, rotary, 1e4f}).ok());
  ASSERT_TRUE(cpu.t().rope_backward({gq, gk, positions, rotary, 1e4f}).ok());
  auto dot = [](const std::vector<double>& a, const std::vector<double>& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
  };
  const double lhs = dot(to_double(q), gq0) + dot(to_double(k), gk0);
  const double rhs = dot(q0, to_double(gq)) + dot(k0, to_double(gk));
  EXPECT_NEAR(lhs, rhs, 1e-4 * std::fabs(lhs) + 1e-4);
  // The dims past rotary_dim pass the gradient unchanged.
  EXPECT_EQ(to_double(gq)[rotary + 1], gq0[rotary + 1]);
  ASSERT_TRUE(cpu.t().rope_backward({q, k, positions, rotary, 1e4f}).ok());
  EXPECT_LT(rel_err(to_double(q), q0), 1e-6);
  EXPECT_LT(rel_err(to_double(k), k0), 1e-6);
}

// The double forward of causal GQA attention with the output gate over dense K/V, rows from
// position 0 (docs/model.md, "GQA over the paged K/V cache" and "The output gate"), summed against
// `c`.
double attention_loss(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& gate,
                      const std::vector<int32_t>& cu, const std::vector<double>& c, double scale) {
  const int64_t Hq = q.dim(1), Hkv = k.dim(1), D = q.dim(2), group = Hq / Hkv;
  const std::vector<double> Q = to_double(q), K = to_double(k), V = to_double(v);
  const std::vector<double> G = gate.defined() ? to_double(gate) : std::vector<double>();
  double loss = 0;
  for (size_t r = 0; r + 1 < cu.size(); ++r)
    for (int64_t t = cu[r]; t < cu[r + 1]; ++t)
      for (int64_t h = 0; h < Hq; ++h) {
        const int64_t kh = h / group;
        std::vector<double> s;
        double mx = -INFINITY;
        for (int64_t j = cu[r]; j <= t; ++j) {
          double d = 0;
          for (int64_t e = 0; e < D; ++e) d += Q[(t * Hq + h) * D + e] * K[(j * Hkv + kh) * D + e];
          s.push_back(d * scale);
          mx = std::max(mx, s.back());
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t e = 0; e < D; ++e) {
          double o = 0;
          for (int64_t j = cu[r]; j <= t; ++j) o += s[j - cu[r]] / sum * V[(j * Hkv + kh) * D + e];
          if (!G.empty()) o /= 1 + std::exp(-G[(t * Hq + h) * D + e]);
          loss += c[(t * Hq + h) * D + e] * o;
        }
      }
  return loss;
}

TEST(TrainingOps, AttentionBackwardMatchesFiniteDifferences) {
  Cpu cpu;
  constexpr double kTol = 2e-5;  // seen 4.5e-7
  const int64_t Hq = 4, Hkv = 2, D = 8;
  const std::vector<int32_t> cu = {0, 1, 6, 13};  // rows of 1, 5 and 7 tokens
  const int64_t T = cu.back();
  HostBatchLayout h;
  for (size_t r = 0; r + 1 < cu.size(); ++r) h.add_row(0, cu[r + 1] - cu[r], {0}, 0);
  BatchLayout layout = make_batch_layout(h, cpu.backend->storage()).value();
  for (bool gated : {true, false}) {
    // q and gate interleaved per head as q_proj emits them; k and v as views of wider rows.
    Tensor qg = random_tensor({T, Hq * 2 * D}, 41);
    Tensor q = qg.as_strided({T, Hq, D}, {Hq * 2 * D, 2 * D, 1});
    Tensor gate = gated ? qg.as_strided({T, Hq, D}, {Hq * 2 * D, 2 * D, 1}, D) : Tensor();
    Tensor k = random_tensor({T, Hkv * D + 3}, 42).as_strided({T, Hkv, D}, {Hkv * D + 3, D, 1});
    Tensor v = random_tensor({T, Hkv, D}, 43);
    Tensor dout = random_tensor({T, Hq, D}, 44);
    Tensor dqg = random_tensor({T, Hq * 2 * D}, 45);
    Tensor dq = dqg.as_strided({T, Hq, D}, {Hq * 2 * D, 2 * D, 1});
    Tensor dgate = gated ? dqg.as_strided({T, Hq, D}, {Hq * 2 * D, 2 * D, 1}, D) : Tensor();
    Tensor dk = random_tensor({T, Hkv, D}, 46), dv = random_tensor({T, Hkv, D}, 47);
    const float scale = 1.f / std::sqrt(static_cast<float>(D));
    AttentionBackwardArgs a{q, k, v, gate, dout, dq, dk, dv, dgate, &layout, scale};
    ASSERT_TRUE(cpu.t().attention_backward(a).ok());
    const std::vector<double> c = to_double(dout);
    auto f = [&] { return attention_loss(q, k, v, gate, cu, c, scale); };
    EXPECT_LT(rel_err(to_double(dq), finite_diff(q, f)), kTol) << "gated " << gated;
    EXPECT_LT(rel_err(to_double(dk), finite_diff(k, f)), kTol) << "gated " << gated;
    EXPECT_LT(rel_err(to_double(dv), finite_diff(v, f)), kTol) << "gated " << gated;
    if (gated) {
      EXPECT_LT(rel_err(to_double(dgate), finite_diff(gate, f)), kTol);
    }
  }
}

// log softmax(h W^T)[target] in double, from the full logits.
std::vector<double> full_logprobs(const Tensor& hidden, const Tensor& w, const std::vector<int32_t>& targets) {
  const int64_t T = hidden.dim(0), W = hidden.dim(1), V = w.dim(0);
  const std::vector<double> Hd = to_double(hidden), Wd = to_double(w);
  std::vector<double> out(T, 0.0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<double> l(V);
    double mx = -INFINITY;
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t j = 0; j < W; ++j) s += Hd[t * W + j] * Wd[v * W + j];
      mx = std::max(mx, l[v] = s);
    }
    double sum = 0;
    for (double x : l) sum += std::exp(x - mx);
    if (targets[t] >= 0) out[t] = l[targets[t]] - mx - std::log(sum);
  }
  return out;
}

TEST(TrainingOps, TokenLogprobsMatchAFullSoftmaxAndDoNotDependOnBlocking) {
  Cpu cpu;
  constexpr double kTol = 2e-6;  // relative to max |logp|; seen 2.3e-7
  for (DType wt : {DType::kF32, DType::kBF16}) {
    for (int64_t V : {int64_t{7}, int64_t{1024}, int64_t{2500}}) {  // one chunk, exactly one, several and a partial
      const int64_t T = 300, W = 16;  // more tokens than one token block
      Tensor hidden = strided(T, W, W + 4, 51, 0.7f);
      Tensor w = random_tensor({V, W}, 52, 1.f, wt);
      std::vector<int32_t> tg(T);
      for (int64_t t = 0; t < T; ++t) tg[t] = t % 11 == 5 ? -1 : static_cast<int32_t>((t * 977) % V);
      Tensor targets = Tensor::from_values(tg, {T});
      Tensor logp = Tensor::empty({T}, DType::kF32), lse = Tensor::empty({T}, DType::kF32);
      ASSERT_TRUE(cpu.t().token_logprobs({hidden, w, targets, logp, lse}).ok());
      const std::vector<double> want = full_logprobs(hidden, w, tg);
      EXPECT_LT(rel_err(to_double(logp), want), kTol) << dtype_name(wt) << " V " << V;
      for (int64_t t = 0; t < T; ++t)
        if (tg[t] < 0) {
          EXPECT_EQ(logp.data<float>()[t], 0.f);
        }
      // The same tokens one at a time: the token blocking changes nothing.
      for (int64_t t : {int64_t{0}, int64_t{257}, T - 1}) {
        Tensor one_lp = Tensor::empty({1}, DType::kF32), one_lse = Tensor::empty({1}, DType::kF32);
        ASSERT_TRUE(cpu.t().token_logprobs({hidden.slice(0, t, t + 1), w, targets.slice(0, t, t + 1), one_lp, one_lse}).ok());
        EXPECT_NEAR(one_lse.data<float>()[0], lse.data<float>()[t], 1e-5 * std::fabs(lse.data<float>()[t]) + 1e-6);
      }
    }
  }
}

TEST(TrainingOps, TokenLogprobsBackwardMatchesFiniteDifferences) {
  Cpu cpu;
  constexpr double kTol = 2e-5;
  const int64_t T = 9, W = 12, V = 2100;
  Tensor hidden = strided(T, W, W + 2, 61, 0.7f);
  Tensor w = random_tensor({V, W}, 62);
  std::vector<int32_t> tg = {3, 2099, -1, 1500, 7, 1024, 1023, 0, 800};
  Tensor targets = Tensor::from_values(tg, {T});
  Tensor coef = random_tensor({T}, 63);
  Tensor logp = Tensor::empty({T}, DType::kF32), lse = Tensor::empty({T}, DType::kF32);
  ASSERT_TRUE(cpu.t().token_logprobs({hidden, w, targets, logp, lse}).ok());
  Tensor dh = strided(T, W, W + 1, 64);
  TokenLogprobBackwardArgs b{hidden, w, targets, lse, coef, dh};
  ASSERT_TRUE(cpu.t().token_logprobs_backward(b).ok());
  const std::vector<double> c = to_double(coef);
  auto f = [&] {
    const std::vector<double> lp = full_logprobs(hidden, w, tg);
    double s = 0;
    for (int64_t t = 0; t < T; ++t) s += c[t] * lp[t];
    return s;
  };
  const std::vector<double> fd = finite_diff(hidden, f);
  EXPECT_LT(rel_err(to_double(dh), fd), kTol);
  for (int64_t j = 0; j < W; ++j) EXPECT_EQ(at(dh, 2 * W + j), 0.f);  // a -1 target gets no gradient
  const std::vector<double> once = to_double(dh);
  b.accumulate = true;
  ASSERT_TRUE(cpu.t().token_logprobs_backward(b).ok());
  std::vector<double> twice = once;
  for (double& v : twice) v *= 2;
  EXPECT_LT(rel_err(to_double(dh), twice), 1e-6);
}

TEST(TrainingOps, SupportsDeclinesMalformedRequestsAndMethodsAgree) {
  Cpu cpu;
  TrainRequest r;
  r.op = TrainOp::kAttentionBackward;
  r.rows = 1, r.tokens = 4, r.q_heads = 3, r.kv_heads = 2, r.head_dim = 8;
  EXPECT_FALSE(cpu.t().supports(r).runs_natively());  // 3 query heads over 2 KV heads
  r.q_heads = 4;
  EXPECT_TRUE(cpu.t().supports(r).runs_natively());
  TrainRequest rope;
  rope.op = TrainOp::kRopeBackward;
  rope.tokens = 2, rope.q_heads = 2, rope.kv_heads = 1, rope.head_dim = 8, rope.inner = 3;
  EXPECT_FALSE(cpu.t().supports(rope).runs_natively());  // odd rotary_dim
  TrainRequest gdn;
  gdn.op = TrainOp::kGdnBackward;
  gdn.rows = 1, gdn.tokens = 4, gdn.q_heads = 2, gdn.kv_heads = 4, gdn.head_dim = 16, gdn.inner = 16;
  EXPECT_TRUE(cpu.t().supports(gdn).runs_natively());
  gdn.q_heads = 3;
  EXPECT_FALSE(cpu.t().supports(gdn).runs_natively());  // 4 value heads over 3 key heads
  gdn.q_heads = 2, gdn.tokens = 0;
  EXPECT_FALSE(cpu.t().supports(gdn).runs_natively());
  TrainRequest norm;
  norm.op = TrainOp::kNormBackward;
  norm.tokens = 2, norm.width = 8, norm.dtype = DType::kBF16;
  EXPECT_FALSE(cpu.t().supports(norm).runs_natively());  // bf16 activations
  // An empty gemm is declined by the predicate, so the method says kUnsupported, naming it.
  Tensor a = Tensor::empty({0, 4}, DType::kF32), b = Tensor::empty({4, 3}, DType::kF32),
         out = Tensor::empty({0, 3}, DType::kF32);
  Status s = cpu.t().gemm({a, b, out});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  // A mis-shaped call is an invalid argument naming the tensor.
  Tensor bad = Tensor::empty({5, 3}, DType::kF32), o2 = Tensor::empty({2, 3}, DType::kF32);
  s = cpu.t().gemm({Tensor::empty({2, 4}, DType::kF32), bad, o2});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("op(b)"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln
