// The losses of train/token_loss.h: every coefficient against a central finite difference of the
// loss (perturbations exactly representable in f32, so the difference is the loss's own), hand
// computed advantages and GRPO values, uniform-reward groups dropped, ECHO exactly zero without
// observation tokens; a batch split into parts, each given the whole batch's LossScale, adds up
// to the whole batch's loss and coefficients (gradient accumulation's means).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "train/token_loss.h"

namespace kiln {
namespace {

using R = TokenRole;

TrainSequence seq(std::vector<TokenRole> roles) {
  TrainSequence s;
  s.roles = std::move(roles);
  s.tokens.assign(s.roles.size(), 1);
  return s;
}

// Log-probabilities on a 1/256 grid in [-4, -1/256], so logp +- 1/1024 is exact in f32.
TokenLogprobs grid_logp(const std::vector<size_t>& lens, uint32_t seed) {
  std::mt19937 rng(seed);
  TokenLogprobs l;
  for (size_t n : lens) {
    std::vector<float> row(n, 0.f);
    for (size_t t = 1; t < n; ++t) row[t] = -static_cast<float>(1 + rng() % 1024) / 256.f;
    l.push_back(row);
  }
  return l;
}

// Every coef[s][t] (t >= 1) against (L(logp + h e) - L(logp - h e)) / 2h.
void expect_coef_matches_fd(const std::function<TokenLoss(const TokenLogprobs&)>& loss, const TokenLogprobs& logp,
                            double tol) {
  const TokenLoss base = loss(logp);
  ASSERT_EQ(base.coef.size(), logp.size());
  const float h = 1.f / 1024.f;
  for (size_t s = 0; s < logp.size(); ++s) {
    ASSERT_EQ(base.coef[s].size(), logp[s].size());
    EXPECT_EQ(base.coef[s][0], 0.f);
    for (size_t t = 1; t < logp[s].size(); ++t) {
      TokenLogprobs up = logp, down = logp;
      up[s][t] += h;
      down[s][t] -= h;
      const double fd = (loss(up).loss - loss(down).loss) / (2.0 * h);
      EXPECT_NEAR(base.coef[s][t], fd, tol * std::max(1.0, std::fabs(fd))) << "sequence " << s << " token " << t;
    }
  }
}

TEST(SftLoss, IsMeanCrossEntropyOverTargetsWithFiniteDifferenceCoefficients) {
  const std::vector<TrainSequence> seqs = {seq({R::kContext, R::kContext, R::kTarget, R::kTarget}),
                                           seq({R::kContext, R::kTarget, R::kContext, R::kTarget, R::kTarget})};
  const TokenLogprobs logp = grid_logp({4, 5}, 1);
  auto f = [&](const TokenLogprobs& l) { return sft_loss(seqs, l, 0.05f).value(); };
  const TokenLoss r = f(logp);
  // Five targets: -(l[0][2] + l[0][3] + l[1][1] + l[1][3] + l[1][4]) / 5.
  const double expect = -(static_cast<double>(logp[0][2]) + logp[0][3] + logp[1][1] + logp[1][3] + logp[1][4]) / 5;
  EXPECT_NEAR(r.loss, expect, 1e-12);
  EXPECT_EQ(r.tokens, 5);
  EXPECT_EQ(r.echo, 0.0);  // no observation tokens: exactly zero
  EXPECT_FLOAT_EQ(r.coef[0][2], -0.2f);
  EXPECT_EQ(r.coef[1][2], 0.f);  // context token
  expect_coef_matches_fd(f, logp, 1e-6);
}

TEST(SftLoss, EchoAddsLambdaTimesObservationCrossEntropy) {
  const std::vector<TrainSequence> seqs = {seq({R::kContext, R::kTarget, R::kObservation, R::kObservation, R::kTarget})};
  TokenLogprobs logp = {{0.f, -1.f, -2.f, -0.5f, -0.25f}};
  const TokenLoss r = sft_loss(seqs, logp, 0.05f).value();
  // main: (1 + 0.25) / 2 = 0.625; ECHO: lambda * (2 + 0.5) / 2 with lambda = 0.05f (as f32).
  const double lambda = 0.05f;
  EXPECT_NEAR(r.echo, lambda * 1.25, 1e-12);
  EXPECT_NEAR(r.loss, 0.625 + lambda * 1.25, 1e-12);
  EXPECT_FLOAT_EQ(r.coef[0][2], -0.025f);
  EXPECT_FLOAT_EQ(r.coef[0][1], -0.5f);
  expect_coef_matches_fd([&](const TokenLogprobs& l) { return sft_loss(seqs, l, 0.05f).value(); }, logp, 1e-6);
}

TEST(SftLoss, RejectsMismatchedShapes) {
  const std::vector<TrainSequence> seqs = {seq({R::kContext, R::kTarget})};
  auto r = sft_loss(seqs, {{0.f, -1.f, -2.f}}, 0.f);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("3 values for 2 tokens"), std::string::npos) << r.status().message();
}

TEST(GrpoAdvantages, HandComputed) {
  const std::vector<double> r = {1.0, 0.0, 0.5};
  const auto dr = grpo_advantages(r, AdvantageMode::kDrGrpo);
  ASSERT_TRUE(dr.has_value());
  EXPECT_DOUBLE_EQ((*dr)[0], 0.5);
  EXPECT_DOUBLE_EQ((*dr)[1], -0.5);
  EXPECT_DOUBLE_EQ((*dr)[2], 0.0);
  // std with Bessel's correction: sqrt((0.25 + 0.25 + 0) / 2) = 0.5.
  const auto va = grpo_advantages(r, AdvantageMode::kVanilla);
  ASSERT_TRUE(va.has_value());
  EXPECT_NEAR((*va)[0], 0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_NEAR((*va)[1], -0.5 / (0.5 + 1e-8), 1e-15);
  EXPECT_FALSE(grpo_advantages(std::vector<double>{2.0, 2.0, 2.0}, AdvantageMode::kDrGrpo).has_value());
  EXPECT_FALSE(grpo_advantages(std::vector<double>{-1.0, -1.0}, AdvantageMode::kVanilla).has_value());
}

GrpoCompletion completion(std::vector<TokenRole> roles, double reward) {
  GrpoCompletion c;
  c.sequence = seq(std::move(roles));
  c.reward = reward;
  return c;
}

TEST(GrpoLoss, HandComputedWithoutBehaviourLogprobs) {
  // Two completions of one target token each, rewards 1 and 0: A = +-0.5, rho = 1, so the token
  // losses are -0.5 and +0.5; the group's two tokens average to 0 and dL/dlogp = -A / 2.
  std::vector<GrpoGroup> g(1);
  g[0].completions = {completion({R::kContext, R::kTarget}, 1.0), completion({R::kContext, R::kTarget}, 0.0)};
  const TokenLoss r = grpo_loss(g, {{0.f, -1.f}, {0.f, -3.f}}, {}, {}).value();
  EXPECT_DOUBLE_EQ(r.loss, 0.0);
  EXPECT_FLOAT_EQ(r.coef[0][1], -0.25f);
  EXPECT_FLOAT_EQ(r.coef[1][1], 0.25f);
  EXPECT_EQ(r.groups_kept, 1);
}

// A batch of three groups: two that differ in rewards and one with equal rewards (dropped), with
// behaviour log-probabilities that put tokens inside the clip band and outside it on both sides.
struct GrpoBatch {
  std::vector<GrpoGroup> groups;
  TokenLogprobs logp, ref;
};

GrpoBatch make_batch(bool behaviour) {
  GrpoBatch b;
  b.groups.resize(3);
  b.groups[0].completions = {completion({R::kContext, R::kContext, R::kTarget, R::kTarget, R::kTarget}, 1.0),
                             completion({R::kContext, R::kContext, R::kTarget, R::kObservation, R::kTarget}, 0.0),
                             completion({R::kContext, R::kContext, R::kTarget, R::kTarget}, 0.25)};
  b.groups[1].completions = {completion({R::kContext, R::kTarget, R::kTarget}, 3.0),
                             completion({R::kContext, R::kTarget, R::kObservation}, 3.0)};
  b.groups[2].completions = {completion({R::kContext, R::kTarget, R::kTarget, R::kTarget}, -1.0),
                             completion({R::kContext, R::kTarget, R::kTarget}, 2.0)};
  std::vector<size_t> lens;
  for (const auto& g : b.groups)
    for (const auto& c : g.completions) lens.push_back(c.sequence.tokens.size());
  b.logp = grid_logp(lens, 3);
  b.ref = grid_logp(lens, 4);
  if (behaviour) {
    // logp - behaviour cycles through -0.5, -0.1, 0, 0.1, 0.4: rho 0.61 and 1.49 lie outside
    // [0.8, 1.2], the others inside, none within 1% of a bound.
    const double deltas[] = {-0.5, -0.1, 0.0, 0.1, 0.4};
    size_t k = 0, s = 0;
    for (auto& g : b.groups)
      for (auto& c : g.completions) {
        c.behavior_logp.assign(c.sequence.tokens.size(), 0.f);
        for (size_t t = 1; t < c.behavior_logp.size(); ++t)
          c.behavior_logp[t] = static_cast<float>(b.logp[s][t] - deltas[k++ % 5]);
        ++s;
      }
  }
  return b;
}

TEST(GrpoLoss, CoefficientsMatchFiniteDifferencesAcrossModes) {
  for (AdvantageMode mode : {AdvantageMode::kDrGrpo, AdvantageMode::kVanilla})
    for (KlEstimator kl : {KlEstimator::kNone, KlEstimator::kK1, KlEstimator::kK3}) {
      SCOPED_TRACE(::testing::Message() << "mode " << static_cast<int>(mode) << " kl " << static_cast<int>(kl));
      const GrpoBatch b = make_batch(/*behaviour=*/true);
      GrpoLossOptions o;
      o.advantage = mode;
      o.kl = kl;
      o.kl_coeff = 0.1f;
      o.clip_epsilon = 0.2f;
      o.echo_lambda = 0.05f;
      auto f = [&](const TokenLogprobs& l) { return grpo_loss(b.groups, l, b.ref, o).value(); };
      const TokenLoss r = f(b.logp);
      EXPECT_EQ(r.groups_kept, 2);
      EXPECT_NE(r.echo, 0.0);  // group 0 has an observation token
      // The uniform group (completions 3 and 4) contributes nothing at all.
      for (size_t s : {3u, 4u})
        for (float c : r.coef[s]) EXPECT_EQ(c, 0.f);
      expect_coef_matches_fd(f, b.logp, 2e-4);
      // Tokens where the clip binds have a zero coefficient (without KL, which always flows).
      if (kl == KlEstimator::kNone) {
        int zeros = 0;
        for (size_t s : {0u, 1u, 2u, 5u, 6u})
          for (size_t t = 1; t < r.coef[s].size(); ++t)
            zeros += r.coef[s][t] == 0.f && b.groups[s < 3 ? 0 : 2].completions[s < 3 ? s : s - 5].sequence.roles[t] == R::kTarget;
        EXPECT_GT(zeros, 0);
      }
    }
}

TEST(GrpoLoss, DroppedGroupChangesNothing) {
  // The batch's loss is the mean over kept groups: adding a uniform group leaves loss and the
  // other coefficients as they were.
  GrpoBatch b = make_batch(true);
  GrpoLossOptions o;
  o.kl = KlEstimator::kK3;
  const TokenLoss with = grpo_loss(b.groups, b.logp, b.ref, o).value();
  std::vector<GrpoGroup> kept = {b.groups[0], b.groups[2]};
  TokenLogprobs lk = {b.logp[0], b.logp[1], b.logp[2], b.logp[5], b.logp[6]};
  TokenLogprobs rk = {b.ref[0], b.ref[1], b.ref[2], b.ref[5], b.ref[6]};
  const TokenLoss without = grpo_loss(kept, lk, rk, o).value();
  EXPECT_DOUBLE_EQ(with.loss, without.loss);
  EXPECT_EQ(with.coef[6], without.coef[4]);
}

TEST(GrpoLoss, NoBehaviourLogprobsActsAsOnPolicy) {
  // rho = 1 in value with d rho / d logp = 1: the same as behaviour log-probabilities equal to logp.
  GrpoBatch off = make_batch(false);
  GrpoBatch on = make_batch(false);
  size_t s = 0;
  for (auto& g : on.groups)
    for (auto& c : g.completions) c.behavior_logp = on.logp[s++];
  GrpoLossOptions o;
  o.kl = KlEstimator::kK1;
  const TokenLoss a = grpo_loss(off.groups, off.logp, off.ref, o).value();
  const TokenLoss b = grpo_loss(on.groups, on.logp, on.ref, o).value();
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  for (size_t i = 0; i < a.coef.size(); ++i)
    for (size_t t = 0; t < a.coef[i].size(); ++t) EXPECT_FLOAT_EQ(a.coef[i][t], b.coef[i][t]);
}

TEST(GrpoLoss, KlTermsHandComputed) {
  // One kept group, two completions of one target token, no behaviour log-probabilities.
  std::vector<GrpoGroup> g(1);
  g[0].completions = {completion({R::kContext, R::kTarget}, 1.0), completion({R::kContext, R::kTarget}, 0.0)};
  const TokenLogprobs logp = {{0.f, -1.f}, {0.f, -2.f}}, ref = {{0.f, -1.5f}, {0.f, -1.f}};
  GrpoLossOptions o;
  o.kl_coeff = 0.1f;
  o.kl = KlEstimator::kK1;
  // d = 0.5 and -1: k1 = 0.1 * d; the policy part averages to 0. KL = 0.1 * (0.5 - 1) / 2.
  EXPECT_NEAR(grpo_loss(g, logp, ref, o)->kl, 0.1f * -0.25, 1e-8);
  o.kl = KlEstimator::kK3;
  const double k3 = 0.1f * ((std::exp(-0.5) - 1 + 0.5) + (std::exp(1.0) - 1 - 1.0)) / 2;
  const TokenLoss r = grpo_loss(g, logp, ref, o).value();
  EXPECT_NEAR(r.kl, k3, 1e-8);
  EXPECT_NEAR(r.loss, k3, 1e-8);
  // dL/dlogp of completion 0: (-A + beta (1 - e^-d)) / 2 = (-0.5 + 0.1 (1 - e^-0.5)) / 2
  EXPECT_NEAR(r.coef[0][1], (-0.5 + 0.1f * (1 - std::exp(-0.5))) / 2, 1e-7);
}

TEST(EchoLoss, ZeroWithoutObservationsEvenWithLambda) {
  std::vector<GrpoGroup> g(1);
  g[0].completions = {completion({R::kContext, R::kTarget}, 1.0), completion({R::kContext, R::kTarget}, 0.0)};
  GrpoLossOptions o;
  o.echo_lambda = 0.5f;
  const TokenLoss r = grpo_loss(g, {{0.f, -1.f}, {0.f, -3.f}}, {}, o).value();
  EXPECT_EQ(r.echo, 0.0);
  EXPECT_EQ(r.loss, 0.0);
}

// A batch split in two parts with the whole batch's scale: the parts' losses add up to the
// whole's and each coefficient is the whole's. The parts hold 2 and 5 targets and 1 and 2
// observation tokens, so means over each part alone (the default) would weigh them otherwise.
TEST(LossScale, SftPartsWithTheWholeScaleAddUpToTheWholeBatch) {
  const std::vector<TrainSequence> whole = {
      seq({R::kContext, R::kTarget, R::kObservation, R::kTarget}),
      seq({R::kContext, R::kTarget, R::kTarget, R::kObservation, R::kTarget, R::kTarget}),
      seq({R::kContext, R::kContext, R::kObservation, R::kTarget})};
  const TokenLogprobs logp = grid_logp({4, 6, 4}, 7);
  const LossScale scale = sft_loss_scale(whole);
  EXPECT_EQ(scale.target_tokens, 7);
  EXPECT_EQ(scale.observation_tokens, 3);
  const TokenLoss all = sft_loss(whole, logp, 0.05f).value();
  const std::vector<TrainSequence> a(whole.begin(), whole.begin() + 1), b(whole.begin() + 1, whole.end());
  const TokenLogprobs la(logp.begin(), logp.begin() + 1), lb(logp.begin() + 1, logp.end());
  const TokenLoss pa = sft_loss(a, la, 0.05f, scale).value(), pb = sft_loss(b, lb, 0.05f, scale).value();
  EXPECT_NEAR(pa.loss + pb.loss, all.loss, 1e-12);
  EXPECT_NEAR(pa.echo + pb.echo, all.echo, 1e-12);
  EXPECT_EQ(pa.coef[0], all.coef[0]);
  EXPECT_EQ(pb.coef[0], all.coef[1]);
  EXPECT_EQ(pb.coef[1], all.coef[2]);
  // Each part's own means would not add up: the check above can fail.
  const double own = sft_loss(a, la, 0.05f).value().loss + sft_loss(b, lb, 0.05f).value().loss;
  EXPECT_GT(std::fabs(own - all.loss), 1e-3);
}

TEST(LossScale, GrpoPartsWithTheWholeScaleAddUpToTheWholeBatch) {
  const GrpoBatch batch = make_batch(/*behaviour=*/true);
  GrpoLossOptions o;
  o.kl = KlEstimator::kK3;
  const LossScale scale = grpo_loss_scale(batch.groups, o.advantage);
  EXPECT_EQ(scale.groups, 2);  // group 1's rewards are all equal
  EXPECT_EQ(scale.observation_tokens, 1);
  const TokenLoss all = grpo_loss(batch.groups, batch.logp, batch.ref, o).value();
  // Group 0 (three completions) in one part, groups 1 and 2 in the other.
  const std::vector<GrpoGroup> a(batch.groups.begin(), batch.groups.begin() + 1), b(batch.groups.begin() + 1, batch.groups.end());
  const TokenLogprobs la(batch.logp.begin(), batch.logp.begin() + 3), lb(batch.logp.begin() + 3, batch.logp.end());
  const TokenLogprobs ra(batch.ref.begin(), batch.ref.begin() + 3), rb(batch.ref.begin() + 3, batch.ref.end());
  const TokenLoss pa = grpo_loss(a, la, ra, o, scale).value(), pb = grpo_loss(b, lb, rb, o, scale).value();
  EXPECT_NEAR(pa.loss + pb.loss, all.loss, 1e-12);
  EXPECT_NEAR(pa.kl + pb.kl, all.kl, 1e-12);
  for (size_t s = 0; s < 3; ++s) EXPECT_EQ(pa.coef[s], all.coef[s]) << s;
  for (size_t s = 3; s < all.coef.size(); ++s) EXPECT_EQ(pb.coef[s - 3], all.coef[s]) << s;
  const double own = grpo_loss(a, la, ra, o).value().loss + grpo_loss(b, lb, rb, o).value().loss;
  EXPECT_GT(std::fabs(own - all.loss), 1e-3);
}

}  // namespace
}  // namespace kiln
