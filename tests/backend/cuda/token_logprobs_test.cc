// The CUDA fused linear log-probs and their backward against the CPU facet (the f32 reference,
// itself checked against a full softmax and finite differences in tests/train/training_ops_test.cc),
// over a table of shapes: one chunk and several with a partial last one (the device's chunks are
// 16384 wide for up to 4096 tokens, narrower for more, down to 4096), the Qwen3.5-4B LM head, and
// strided hidden / dhidden rows.
//
// Tolerances. f32 head: both sides run f32 GEMMs, so logp and lse differ only by summation order
// (1e-5 relative to 1 + |value|); dhidden by 2e-5 of its scale |coef_t| max|W| (sum_v |G_tv| <=
// 2 |coef_t|, so |dhidden_t| <= 2 |coef_t| max|W|). bf16 head: the device rounds hidden to bf16, so
// the CPU is given the same bf16-rounded hidden; the products are then exact on both sides and the
// forward differs by f32 accumulation order only (tensor cores accumulate in f32, in a different
// order: 4e-5 relative to 1 + |value|). The backward also rounds G to bf16 (relative error <= 2^-9
// per entry), which moves dhidden_tk by at most 2^-9 sum_v |G_tv| |W_vk| <= 2^-8 |coef_t| max|W|.
// f16 head: the forward as bf16's (hidden rounded to f16 on both sides); the backward keeps G in
// f32 and widens the head's rows, so its bound is f32's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "backend/training_facets.h"
#include "cuda_test_util.h"

namespace kiln {
namespace {

using testing::to_device;
using testing::to_host;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

struct Case {
  const char* name;
  int64_t T, W, V;
  DType head;
  int64_t pad;  // extra elements per row of hidden and dhidden (strided rows when > 0)
};

const Case kCases[] = {
    {"f32, one chunk", 37, 64, 1000, DType::kF32, 0},
    {"f32, 16384 x 3 + 848, strided rows", 33, 96, 50000, DType::kF32, 3},
    {"bf16, one chunk", 5, 64, 1000, DType::kBF16, 0},
    {"bf16, 16384 x 3 + 848, strided rows", 33, 96, 50000, DType::kBF16, 5},
    {"bf16, 20000 tokens: 4096 x 2 + 808", 20000, 32, 9000, DType::kBF16, 0},
    {"bf16, Qwen3.5-4B head 248320 x 2560", 4, 2560, 248320, DType::kBF16, 0},
    {"f16, 16384 x 3 + 848, strided rows", 33, 96, 50000, DType::kF16, 2},
};

// Uniform in [-a, a] from a counter hash: fast enough for the 4B head's 635M entries.
float hashed_uniform(uint64_t i, uint32_t seed, float a) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (uint64_t{seed} << 32);
  x ^= x >> 31;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 29;
  return (static_cast<float>(x >> 40) * (1.f / 16777216.f) * 2.f - 1.f) * a;
}

Tensor random_host(Shape shape, uint32_t seed, float a, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = hashed_uniform(static_cast<uint64_t>(i), seed, a);
    if (dtype == DType::kBF16) t.data<uint16_t>()[i] = f32_to_bf16(v);
    else if (dtype == DType::kF16) t.data<uint16_t>()[i] = f32_to_f16(v);
    else t.data<float>()[i] = v;
  }
  return t;
}

float max_abs(const Tensor& t) {
  float m = 0.f;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(testing::value_at(t, i)));
  return m;
}

// The [T, W] columns of a host [T, W + pad] tensor, contiguous, rounded to `round` (bf16/f16) or
// left f32.
Tensor columns(const Tensor& base, int64_t W, DType round) {
  const int64_t T = base.dim(0), S = base.dim(1);
  Tensor out = Tensor::empty({T, W}, DType::kF32);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t k = 0; k < W; ++k) {
      out.data<float>()[t * W + k] = rounded_to(round, base.data<float>()[t * S + k]);
    }
  return out;
}

struct Inputs {
  Tensor hidden_base;  // host [T, W + pad] f32
  Tensor head;         // host [V, W]
  std::vector<int32_t> targets;
  std::vector<float> coef;
};

// Targets: the last and first ids, the first id past a 16384 chunk, -1 every 7th token; coef
// N-ish with a zero every 5th token (a valid target whose gradient row must vanish).
Inputs make_inputs(const Case& c) {
  Inputs in;
  in.hidden_base = random_host({c.T, c.W + c.pad}, 11, 1.7f, DType::kF32);
  // Logits of standard deviation ~2: hidden ~U(-1.7, 1.7) (sd ~1), W ~U(-a, a) with sd 2/sqrt(W).
  in.head = random_host({c.V, c.W}, 12, 2.f * std::sqrt(3.f / static_cast<float>(c.W)), c.head);
  in.targets.resize(static_cast<size_t>(c.T));
  in.coef.resize(static_cast<size_t>(c.T));
  for (int64_t t = 0; t < c.T; ++t) {
    in.targets[t] = static_cast<int32_t>((t * 7919 + 13) % c.V);
    in.coef[t] = hashed_uniform(static_cast<uint64_t>(t), 13, 1.f);
    if (t % 5 == 1) in.coef[t] = 0.f;
  }
  in.targets[0] = static_cast<int32_t>(c.V - 1);
  if (c.T > 1) in.targets[1] = 0;
  if (c.T > 2) in.targets[2] = static_cast<int32_t>(16384 % c.V);
  for (int64_t t = 3; t < c.T; t += 7) in.targets[t] = -1;
  return in;
}

// max over i of |got - want| / (scale * (1 + |want|)): <= 1 passes.
double worst_ratio(const Tensor& got, const Tensor& want, double scale) {
  double worst = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    const double w = want.data<float>()[i], g = got.data<float>()[i];
    const double r = std::fabs(g - w) / (scale * (1 + std::fabs(w)));
    if (std::isnan(r)) return INFINITY;
    worst = std::max(worst, r);
  }
  return worst;
}

TEST(CudaTokenLogprobs, MatchTheCpuFacetOverTheShapeTable) {
  KILN_CUDA_OR_SKIP(be);
  auto host = cpu();
  for (const Case& c : kCases) {
    SCOPED_TRACE(c.name);
    const double fwd_tol = c.head == DType::kF32 ? 1e-5 : 4e-5;
    const double bwd_tol = c.head == DType::kBF16 ? std::ldexp(1.0, -8) + 2e-5 : 2e-5;
    const Inputs in = make_inputs(c);
    const int64_t T = c.T, W = c.W, S = c.W + c.pad;

    // The reference: the CPU facet on the hidden states the device's GEMM sees.
    const Tensor hidden_ref = columns(in.hidden_base, W, c.head);
    const Tensor targets = Tensor::from_values(in.targets, {T});
    const Tensor coef = Tensor::from_values(in.coef, {T});
    Tensor logp_ref = Tensor::empty({T}, DType::kF32), lse_ref = Tensor::empty({T}, DType::kF32);
    ASSERT_TRUE(host->training().token_logprobs({hidden_ref, in.head, targets, logp_ref, lse_ref}).ok());
    Tensor dh_ref = Tensor::empty({T, W}, DType::kF32);
    Status s = host->training().token_logprobs_backward({hidden_ref, in.head, targets, lse_ref, coef, dh_ref});
    ASSERT_TRUE(s.ok()) << s.to_string();

    // The device: unrounded f32 hidden, strided where the case pads its rows.
    const Tensor d_hidden_base = to_device(*be, in.hidden_base);
    const Tensor d_hidden = d_hidden_base.slice(1, 0, W);
    const Tensor d_head = to_device(*be, in.head);
    const Tensor d_targets = to_device(*be, targets);
    const Tensor d_coef = to_device(*be, coef);
    Tensor d_logp = be->storage().allocate({T}, DType::kF32).value();
    Tensor d_lse = be->storage().allocate({T}, DType::kF32).value();
    s = be->training().token_logprobs({d_hidden, d_head, d_targets, d_logp, d_lse});
    ASSERT_TRUE(s.ok()) << s.to_string();
    const Tensor logp = to_host(*be, d_logp), lse = to_host(*be, d_lse);
    const double logp_ratio = worst_ratio(logp, logp_ref, fwd_tol), lse_ratio = worst_ratio(lse, lse_ref, fwd_tol);
    EXPECT_LE(logp_ratio, 1.0) << "logp error / tolerance";
    EXPECT_LE(lse_ratio, 1.0) << "lse error / tolerance";
    std::printf("  [%s] logp %.3g, lse %.3g of the tolerance\n", c.name, logp_ratio, lse_ratio);
    for (int64_t t = 0; t < T; ++t) {
      if (in.targets[t] < 0) {
        ASSERT_EQ(logp.data<float>()[t], 0.f) << "token " << t << " has no target";
      }
    }

    // The backward from the reference's lse (so only the backward is compared), over a
    // prefilled [T, W + pad] buffer: accumulate adds to it, otherwise it is overwritten; the
    // padding columns are never touched.
    const float scale_w = max_abs(in.head);
    const Tensor d_lse_ref = to_device(*be, lse_ref);
    for (bool accumulate : {false, true}) {
      SCOPED_TRACE(accumulate ? "accumulate" : "overwrite");
      const Tensor prefill = random_host({T, S}, 14, 0.5f, DType::kF32);
      const Tensor d_dh_base = to_device(*be, random_host({T, S}, 14, 0.5f, DType::kF32));  // a copy of prefill
      TokenLogprobBackwardArgs b{d_hidden, d_head, d_targets, d_lse_ref, d_coef, d_dh_base.slice(1, 0, W)};
      b.accumulate = accumulate;
      s = be->training().token_logprobs_backward(b);
      ASSERT_TRUE(s.ok()) << s.to_string();
      const Tensor dh = to_host(*be, d_dh_base);
      double worst = 0;
      for (int64_t t = 0; t < T; ++t) {
        const float* got = dh.data<float>() + t * S;
        const float* pre = prefill.data<float>() + t * S;
        const bool zero_row = in.targets[t] < 0 || in.coef[t] == 0.f;
        const double scale = std::fabs(in.coef[t]) * scale_w;
        for (int64_t k = 0; k < W; ++k) {
          const float base = accumulate ? pre[k] : 0.f;
          if (zero_row) {
            ASSERT_EQ(got[k], base) << "token " << t << " (target " << in.targets[t] << ", coef " << in.coef[t]
                                    << ") must get no gradient; column " << k;
            continue;
          }
          const double want = dh_ref.data<float>()[t * W + k];
          const double err = std::fabs(static_cast<double>(got[k]) - base - want);
          // Plus the f32 rounding of the sum with the prefill (a token's coef may be tiny).
          const double tol = bwd_tol * scale + 2.5e-7 * (std::fabs(base) + std::fabs(want));
          worst = std::isnan(err) ? INFINITY : std::max(worst, err / tol);
        }
        for (int64_t k = W; k < S; ++k) ASSERT_EQ(got[k], pre[k]) << "padding of row " << t << " was written";
      }
      EXPECT_LE(worst, 1.0) << "dhidden error / tolerance";
      std::printf("  [%s] dhidden (%s) %.3g of the tolerance\n", c.name, accumulate ? "accumulate" : "overwrite", worst);
    }
  }
}

TEST(CudaTokenLogprobs, DeclinesAnIntegerHeadAndNamesBadArguments) {
  KILN_CUDA_OR_SKIP(be);
  TrainingFacet& tr = be->training();
  const int64_t T = 4, W = 8, V = 100;
  const Tensor hidden = to_device(*be, random_host({T, W}, 21, 1.f, DType::kF32));
  const Tensor head = to_device(*be, random_host({V, W}, 22, 0.5f, DType::kBF16));
  const Tensor targets = to_device(*be, testing::host_i32({1, 2, 3, -1}));
  Tensor logp = be->storage().allocate({T}, DType::kF32).value();
  Tensor lse = be->storage().allocate({T}, DType::kF32).value();
  ASSERT_TRUE(tr.token_logprobs({hidden, head, targets, logp, lse}).ok());

  TrainRequest r = describe(TokenLogprobArgs{hidden, head, targets, logp, lse});
  const Support bf16 = tr.supports(r);
  EXPECT_TRUE(bf16.runs_natively());
  EXPECT_NE(bf16.constraint.find("bf16"), std::string::npos) << bf16.constraint;  // says what is rounded
  r.tokens = 0;
  EXPECT_FALSE(tr.supports(r).runs_natively());

  // An integer head is declined, both ways, naming why.
  const Tensor int_head = to_device(*be, Tensor::empty({V, W}, DType::kI32));
  Status s = tr.token_logprobs({hidden, int_head, targets, logp, lse});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("lm_head must be f32, bf16 or f16"), std::string::npos) << s.to_string();
  Tensor coef = to_device(*be, Tensor::from_values(std::vector<float>{1, 1, 1, 1}, {T}));
  Tensor dh = be->storage().allocate({T, W}, DType::kF32).value();
  s = tr.token_logprobs_backward({hidden, int_head, targets, lse, coef, dh});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("lm_head must be f32, bf16 or f16"), std::string::npos) << s.to_string();

  // A target past the vocabulary names itself and its token.
  const Tensor bad_targets = to_device(*be, testing::host_i32({1, 2, 100, -1}));
  s = tr.token_logprobs({hidden, head, bad_targets, logp, lse});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("target 100 at token 2"), std::string::npos) << s.to_string();
  s = tr.token_logprobs_backward({hidden, head, bad_targets, lse, coef, dh});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("target 100 at token 2"), std::string::npos) << s.to_string();

  // Mis-shaped tensors are named.
  Tensor short_lse = be->storage().allocate({T - 1}, DType::kF32).value();
  s = tr.token_logprobs({hidden, head, targets, logp, short_lse});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'lse'"), std::string::npos) << s.to_string();
  Tensor wide_dh = be->storage().allocate({T, W + 1}, DType::kF32).value();
  s = tr.token_logprobs_backward({hidden, head, targets, lse, coef, wide_dh});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << s.to_string();
  EXPECT_NE(s.message().find("'dhidden'"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln
