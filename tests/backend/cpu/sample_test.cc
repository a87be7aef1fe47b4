// The CPU reference `sample`: the transforms of backend/sampling_math.h (what the engine's
// Sampler runs) applied to each row with its own u, checked against those
// transforms run directly and against hand-computed rows; bad input names the problem.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/registry.h"
#include "backend/sampling_math.h"
#include "test_util.h"

namespace kiln {
namespace {

struct Drawn {
  int32_t token = 0;
  float logprob = 0;
};

std::vector<Drawn> run(Backend& be, const Tensor& logits, const std::vector<SampleRow>& rows) {
  const auto n = static_cast<int64_t>(rows.size());
  Tensor ids = Tensor::empty({n}, DType::kI32), lp = Tensor::empty({n}, DType::kF32);
  Status s = be.sampling().sample({logits, rows, ids, lp});
  EXPECT_TRUE(s.ok()) << s.to_string();
  std::vector<Drawn> out(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) out[i] = {ids.data<int32_t>()[i], lp.data<float>()[i]};
  return out;
}

// The transforms in the engine Sampler's order, written out here.
Drawn direct(std::span<const float> row, const SampleRow& r) {
  std::vector<float> l(row.begin(), row.end());
  SamplingParams p;
  p.temperature = r.temperature;
  p.top_k = r.top_k;
  p.top_p = r.top_p;
  p.min_p = r.min_p;
  p.repetition_penalty = r.repetition_penalty;
  p.presence_penalty = r.presence_penalty;
  p.frequency_penalty = r.frequency_penalty;
  apply_penalties(l, p, r.seen, r.generated);
  apply_temperature(l, p.temperature);
  apply_top_k(l, p.top_k);
  std::vector<double> probs = softmax(l);
  apply_min_p(probs, p.min_p);
  apply_top_p(probs, p.top_p);
  const int32_t t = draw(probs, r.u);
  return {t, static_cast<float>(std::log(probs[static_cast<size_t>(t)]))};
}

TEST(CpuSample, EqualsTheTransformsOnFixedRows) {
  auto be = create_backend("cpu").value();
  const int64_t V = 500;
  struct P {
    float t;
    int32_t k;
    float top_p, min_p, rep, pres, freq;
  };
  const P params[] = {
      {1.f, 0, 1.f, 0.f, 1.f, 0.f, 0.f},     {0.5f, 20, 1.f, 0.f, 1.f, 0.f, 0.f},
      {1.5f, 0, 0.9f, 0.f, 1.f, 0.f, 0.f},   {1.f, 50, 0.5f, 0.05f, 1.f, 0.f, 0.f},
      {1.f, 0, 1.f, 0.05f, 1.3f, 0.f, 0.f},  {0.7f, 0, 0.8f, 0.f, 1.f, 0.6f, 0.3f},
      {1.2f, 1, 1.f, 0.f, 1.5f, 1.f, -0.5f}, {1.f, 40, 0.95f, 0.02f, 0.8f, -0.4f, 0.2f},
  };
  std::vector<int32_t> seen = {3, 7, 7, 42, 499, -1, 500, 3, 11, 11, 11, 250};
  std::mt19937_64 g(5);
  std::vector<SampleRow> rows;
  for (int rep = 0; rep < 4; ++rep)
    for (const P& p : params) {
      SampleRow r;
      r.temperature = p.t;
      r.top_k = p.k;
      r.top_p = p.top_p;
      r.min_p = p.min_p;
      r.repetition_penalty = p.rep;
      r.presence_penalty = p.pres;
      r.frequency_penalty = p.freq;
      r.seen = seen;
      r.generated = std::span<const int32_t>(seen).subspan(4);
      r.u = static_cast<double>(g() >> 11) * 0x1.0p-53;
      rows.push_back(r);
    }
  const auto n = static_cast<int64_t>(rows.size());
  Tensor logits = testing::random_tensor({n, V}, 11, 3.f);
  // The penalised tokens among the likely ones, so that the penalties move the draw.
  for (int64_t r = 0; r < n; ++r)
    for (int32_t t : {3, 7, 11, 42}) logits.data<float>()[r * V + t] += 6.f;
  const std::vector<Drawn> got = run(*be, logits, rows);
  int penalised_draws = 0;
  for (int64_t r = 0; r < n; ++r) {
    const Drawn want = direct(std::span<const float>(logits.data<float>() + r * V, V), rows[r]);
    EXPECT_EQ(got[r].token, want.token) << "row " << r;
    EXPECT_EQ(got[r].logprob, want.logprob) << "row " << r;
    penalised_draws += want.token == 3 || want.token == 7 || want.token == 11 || want.token == 42;
  }
  EXPECT_GT(penalised_draws, 0) << "the rows should exercise the penalised tokens";
}

TEST(CpuSample, HandComputedRows) {
  auto be = create_backend("cpu").value();
  // logits 1, 2, 3, 4; top-k 2 keeps 3 and 4: p(2) = e^3 / (e^3 + e^4) = 0.2689.
  Tensor logits = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, {3, 4});
  const std::vector<int32_t> seen = {3, 3};
  std::vector<SampleRow> rows(3);
  rows[0].top_k = 2;
  rows[0].u = 0.2;
  rows[1].top_k = 2;
  rows[1].u = 0.3;
  // Repetition penalty 2 on token 3 (once, though seen twice): logits 1, 2, 3, 2; top-k 1: token 2.
  rows[2].top_k = 1;
  rows[2].repetition_penalty = 2.f;
  rows[2].seen = seen;
  rows[2].u = 0.9;
  const std::vector<Drawn> got = run(*be, logits, rows);
  const double p2 = std::exp(3.0) / (std::exp(3.0) + std::exp(4.0));
  EXPECT_EQ(got[0].token, 2);
  EXPECT_NEAR(got[0].logprob, std::log(p2), 1e-6);
  EXPECT_EQ(got[1].token, 3);
  EXPECT_NEAR(got[1].logprob, std::log(1 - p2), 1e-6);
  EXPECT_EQ(got[2].token, 2);
  EXPECT_EQ(got[2].logprob, 0.f);
}

// Greedy rows (temperature 0: the first largest penalised logit, its logprob under their softmax)
// and the alternatives of the final distribution, most likely first, ties by lower id.
TEST(CpuSample, GreedyRowsAndAlternativesByHand) {
  auto be = create_backend("cpu").value();
  Tensor logits = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 5, 5, 1, 0, 1, 2, 3, 4}, {4, 4});
  const std::vector<int32_t> seen = {3};
  std::vector<SampleRow> rows(4);
  rows[0].temperature = 0.f;  // token 3
  rows[0].top_logprobs = 2;
  rows[1].temperature = 0.f;  // repetition penalty 2 on token 3: logits 1, 2, 3, 2, token 2
  rows[1].repetition_penalty = 2.f;
  rows[1].seen = seen;
  rows[2].temperature = 0.f;  // a tie: the first of the largest
  rows[3].top_k = 2;          // temperature 1: p = 0, 0, p2, 1 - p2
  rows[3].u = 0.2;
  rows[3].top_logprobs = 3;
  Tensor ids = Tensor::empty({4}, DType::kI32), lp = Tensor::empty({4}, DType::kF32);
  Tensor top_ids = Tensor::empty({4, 3}, DType::kI32), top_lp = Tensor::empty({4, 3}, DType::kF32);
  SampleArgs args{logits, rows, ids, lp};
  args.top_ids = top_ids;
  args.top_logprobs = top_lp;
  ASSERT_TRUE(be->sampling().sample(args).ok());
  const double z0 = std::exp(1.0) + std::exp(2.0) + std::exp(3.0) + std::exp(4.0);
  EXPECT_EQ(ids.data<int32_t>()[0], 3);
  EXPECT_NEAR(lp.data<float>()[0], std::log(std::exp(4.0) / z0), 1e-6);
  EXPECT_EQ(top_ids.data<int32_t>()[0], 3);
  EXPECT_EQ(top_ids.data<int32_t>()[1], 2);
  EXPECT_NEAR(top_lp.data<float>()[1], std::log(std::exp(3.0) / z0), 1e-6);
  const double z1 = std::exp(1.0) + 2 * std::exp(2.0) + std::exp(3.0);
  EXPECT_EQ(ids.data<int32_t>()[1], 2);
  EXPECT_NEAR(lp.data<float>()[1], std::log(std::exp(3.0) / z1), 1e-6);
  EXPECT_EQ(ids.data<int32_t>()[2], 0);
  const double p2 = std::exp(3.0) / (std::exp(3.0) + std::exp(4.0));
  EXPECT_EQ(ids.data<int32_t>()[3], 2);
  const int32_t* t = top_ids.data<int32_t>() + 9;
  const float* l = top_lp.data<float>() + 9;
  EXPECT_EQ(t[0], 3);
  EXPECT_NEAR(l[0], std::log(1 - p2), 1e-6);
  EXPECT_EQ(t[1], 2);
  EXPECT_NEAR(l[1], std::log(p2), 1e-6);
  EXPECT_EQ(t[2], 0);  // probability 0, tied with token 1: the lower id
  EXPECT_EQ(l[2], -INFINITY);
}

// A structured-output row: its mask removes ids before the transforms (greedy takes the best
// allowed id, a draw's distribution is renormalised over the allowed ids) and its logit bias is
// added first; a bias id out of range is refused by name.
TEST(CpuSample, MaskedAndBiasedRowsByHand) {
  auto be = create_backend("cpu").value();
  Tensor logits = Tensor::from_values(std::vector<float>{1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4}, {3, 4});
  const uint32_t allow_0_1 = 0b0011u;
  const std::vector<std::pair<int32_t, float>> bias = {{0, 5.f}, {3, -100.f}};
  std::vector<SampleRow> rows(3);
  rows[0].temperature = 0.f;  // ids 0 and 1 allowed: token 1
  rows[0].allowed = &allow_0_1;
  rows[1].temperature = 0.f;  // logits 6, 2, 3, -96: token 0
  rows[1].bias = bias;
  rows[2].allowed = &allow_0_1;  // temperature 1 over ids 0 and 1 only
  rows[2].u = 0.5;
  const std::vector<Drawn> out = run(*be, logits, rows);
  EXPECT_EQ(out[0].token, 1);
  EXPECT_NEAR(out[0].logprob, std::log(std::exp(2.0) / (std::exp(1.0) + std::exp(2.0))), 1e-6);
  EXPECT_EQ(out[1].token, 0);
  const double p0 = std::exp(1.0) / (std::exp(1.0) + std::exp(2.0));  // u = 0.5 > p0: token 1
  EXPECT_EQ(out[2].token, 1);
  EXPECT_NEAR(out[2].logprob, std::log(1 - p0), 1e-6);
  const std::vector<std::pair<int32_t, float>> bad = {{4, 1.f}};
  rows[1].bias = bad;
  Tensor ids = Tensor::empty({3}, DType::kI32), lp = Tensor::empty({3}, DType::kF32);
  const Status s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("row 1: a logit bias id must be in [0, vocab), got 4"), std::string::npos) << s.to_string();
}

// The argmax of a structured-output row: the first largest allowed logit; an all -inf row takes
// its first allowed id; rows without a mask keep the plain argmax.
TEST(CpuSample, MaskedArgmaxByHand) {
  auto be = create_backend("cpu").value();
  Tensor logits = Tensor::from_values(std::vector<float>{1, 5, 3, 3, -INFINITY, -INFINITY, -INFINITY, -INFINITY, 1, 5, 3, 3}, {3, 4});
  const uint32_t allow_2_3 = 0b1100u, allow_1_2 = 0b0110u;
  const std::vector<const uint32_t*> allowed = {&allow_2_3, &allow_1_2, nullptr};
  Tensor ids = Tensor::empty({3}, DType::kI32);
  ASSERT_TRUE(be->sampling().argmax({logits, ids, allowed}).ok());
  EXPECT_EQ(ids.data<int32_t>()[0], 2);  // 3 and 3 allowed: the first
  EXPECT_EQ(ids.data<int32_t>()[1], 1);  // all -inf: the first allowed
  EXPECT_EQ(ids.data<int32_t>()[2], 1);
  const std::vector<const uint32_t*> short_list = {&allow_2_3};
  const Status s = be->sampling().argmax({logits, ids, short_list});
  EXPECT_NE(s.message().find("1 masks for 3 logits rows"), std::string::npos) << s.to_string();
}

TEST(CpuSample, BadInputNamesTheProblem) {
  auto be = create_backend("cpu").value();
  Tensor logits = testing::random_tensor({2, 10}, 3);
  std::vector<SampleRow> rows(2);
  Tensor ids = Tensor::empty({2}, DType::kI32), lp = Tensor::empty({2}, DType::kF32);
  Status s = be->sampling().sample({logits, std::span<const SampleRow>(rows).first(1), ids, lp});
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("1 sample rows for 2 logits rows"), std::string::npos) << s.to_string();
  rows[1].temperature = -1.f;
  s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_NE(s.message().find("row 1: temperature must be >= 0"), std::string::npos) << s.to_string();
  rows[1].temperature = 1.f;
  rows[1].top_logprobs = 21;
  s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_NE(s.message().find("'top_ids' is missing"), std::string::npos) << s.to_string();
  SampleArgs with_top{logits, rows, ids, lp};
  with_top.top_ids = Tensor::empty({2, 21}, DType::kI32);
  with_top.top_logprobs = Tensor::empty({2, 21}, DType::kF32);
  s = be->sampling().sample(with_top);
  EXPECT_NE(s.message().find("row 1: top_logprobs must be in [0, 20]"), std::string::npos) << s.to_string();
  rows[1].top_logprobs = 4;
  with_top.top_logprobs = Tensor::empty({2, 3}, DType::kF32);
  s = be->sampling().sample(with_top);
  EXPECT_NE(s.message().find("top_logprobs is f32[2, 3], expected a contiguous [2, >= 4]"), std::string::npos)
      << s.to_string();
  rows[1].top_logprobs = 0;
  rows[0].top_p = 0.f;
  s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_NE(s.message().find("row 0: top_p"), std::string::npos) << s.to_string();
  rows[0].top_p = 1.f;
  rows[0].u = 1.0;
  s = be->sampling().sample({logits, rows, ids, lp});
  EXPECT_NE(s.message().find("row 0: u must be in [0, 1)"), std::string::npos) << s.to_string();
  rows[0].u = 0.5;
  s = be->sampling().sample({logits, rows, Tensor::empty({2}, DType::kF32), lp});
  EXPECT_NE(s.message().find("'ids'"), std::string::npos) << s.to_string();
  s = be->sampling().sample({logits, rows, ids, Tensor::empty({3}, DType::kF32)});
  EXPECT_NE(s.message().find("'logprobs'"), std::string::npos) << s.to_string();
  s = be->sampling().sample({Tensor(), rows, ids, lp});
  EXPECT_NE(s.message().find("'logits' is missing"), std::string::npos) << s.to_string();
  EXPECT_TRUE(be->sampling().sample({logits, rows, ids, lp}).ok());
}

}  // namespace
}  // namespace kiln
