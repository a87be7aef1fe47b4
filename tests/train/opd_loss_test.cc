// The OPD loss of train/token_loss.h worked by hand: the per-token advantage teacher - behaviour
// (plus the reward term), the importance weight, the group and batch means, the reverse KL it
// reports; and every coefficient against a central finite difference of the loss.
#include <gtest/gtest.h>

#include <cmath>

#include "train/token_loss.h"

namespace kiln {
namespace {

using R = TokenRole;

GrpoCompletion completion(std::vector<TokenRole> roles, std::vector<float> behaviour, std::vector<float> teacher,
                          double reward = 0) {
  GrpoCompletion c;
  c.sequence.roles = std::move(roles);
  c.sequence.tokens.assign(c.sequence.roles.size(), 1);
  c.behavior_logp = std::move(behaviour);
  c.teacher_logp = std::move(teacher);
  c.reward = reward;
  return c;
}

// Two groups: the first of two completions with 2 and 1 target tokens, the second of one completion
// with 1 target token. Values on a 1/8 grid.
std::vector<GrpoGroup> groups() {
  std::vector<GrpoGroup> g(2);
  g[0].completions.push_back(completion({R::kContext, R::kTarget, R::kTarget}, {0, -1.f, -2.f}, {0, -0.5f, -3.f}, 1));
  g[0].completions.push_back(completion({R::kContext, R::kContext, R::kTarget}, {0, -7.f, -0.25f}, {0, -9.f, -0.75f}, 0));
  g[1].completions.push_back(completion({R::kContext, R::kTarget}, {0, -1.5f}, {0, -1.f}, 0));
  return g;
}

TEST(OpdLoss, OnPolicyHandComputed) {
  const auto g = groups();
  // On-policy: logp equals the behaviour log-probabilities, so rho = 1.
  const TokenLogprobs logp = {{0, -1.f, -2.f}, {0, -7.f, -0.25f}, {0, -1.5f}};
  auto l = opd_loss(g, logp, {});
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  // Advantages a = teacher - behaviour: group 0: +0.5, -1.0 (first completion), -0.5 (second; its
  // first kTarget is t = 2 only); group 1: +0.5. Group 0 has 3 tokens, group 1 one; 2 groups.
  // Group 0: -(0.5 - 1.0 - 0.5) / 3 = 1/3; group 1: -(0.5) / 1 = -0.5; batch: (1/3 - 0.5) / 2.
  EXPECT_NEAR(l->loss, (1.0 / 3 - 0.5) / 2, 1e-12);
  // dl/dlogp = -rho a / (n_g G).
  EXPECT_FLOAT_EQ(l->coef[0][1], static_cast<float>(-0.5 / 6));
  EXPECT_FLOAT_EQ(l->coef[0][2], static_cast<float>(1.0 / 6));
  EXPECT_FLOAT_EQ(l->coef[1][1], 0.f);  // context
  EXPECT_FLOAT_EQ(l->coef[1][2], static_cast<float>(0.5 / 6));
  EXPECT_FLOAT_EQ(l->coef[2][1], static_cast<float>(-0.5 / 2));
  EXPECT_FLOAT_EQ(l->coef[0][0], 0.f);
  // The reverse KL: mean of behaviour - teacher over the 4 target tokens: (-0.5 + 1 + 0.5 - 0.5) / 4.
  EXPECT_NEAR(l->kl, 0.5 / 4, 1e-12);
  EXPECT_EQ(l->tokens, 4);
}

TEST(OpdLoss, ImportanceWeightAndRewardTermHandComputed) {
  const auto g = groups();
  // Off-policy by ln 2 on group 0's first token: rho = 2 there.
  const TokenLogprobs logp = {{0, static_cast<float>(-1.0 + std::log(2.0)), -2.f}, {0, -7.f, -0.25f}, {0, -1.5f}};
  OpdLossOptions o;
  o.reward_coeff = 0.5f;  // group 0's rewards 1, 0: dr_grpo advantages +0.5, -0.5; group 1 (one reward): none
  auto l = opd_loss(g, logp, o);
  ASSERT_TRUE(l.ok());
  // Token advantages: 0.5 + 0.25, -1.0 + 0.25, -0.5 - 0.25; group 1: 0.5.
  const double rho = std::exp(static_cast<double>(logp[0][1]) + 1.0);
  const double g0 = -(rho * 0.75 + (-0.75) + (-0.75)) / 3, g1 = -0.5;
  EXPECT_NEAR(l->loss, (g0 + g1) / 2, 1e-6);
  EXPECT_NEAR(l->coef[0][1], -rho * 0.75 / 6, 1e-7);
  EXPECT_NEAR(l->coef[0][2], 0.75 / 6, 1e-7);
  EXPECT_NEAR(l->coef[1][2], 0.75 / 6, 1e-7);
}

TEST(OpdLoss, CoefficientsAreTheLossGradient) {
  const auto g = groups();
  OpdLossOptions o;
  o.reward_coeff = 0.25f;
  const TokenLogprobs logp = {{0, -0.75f, -2.25f}, {0, -7.f, -0.5f}, {0, -1.25f}};
  auto base = opd_loss(g, logp, o);
  ASSERT_TRUE(base.ok());
  const float h = 1.f / 1024;
  for (size_t s = 0; s < logp.size(); ++s)
    for (size_t t = 1; t < logp[s].size(); ++t) {
      TokenLogprobs up = logp, down = logp;
      up[s][t] += h;
      down[s][t] -= h;
      const double fd = (opd_loss(g, up, o)->loss - opd_loss(g, down, o)->loss) / (2.0 * h);
      EXPECT_NEAR(base->coef[s][t], fd, 1e-5) << "s=" << s << " t=" << t;
    }
}

TEST(OpdLoss, PartsWithTheWholeScaleAddUpToTheWhole) {
  const auto g = groups();
  const TokenLogprobs logp = {{0, -0.75f, -2.25f}, {0, -7.f, -0.5f}, {0, -1.25f}};
  const LossScale whole = opd_loss_scale(g);
  EXPECT_EQ(whole.groups, 2);
  EXPECT_EQ(whole.target_tokens, 4);
  auto all = opd_loss(g, logp, {});
  auto a = opd_loss(std::span(g).first(1), TokenLogprobs(logp.begin(), logp.begin() + 2), {}, whole);
  auto b = opd_loss(std::span(g).last(1), TokenLogprobs(logp.begin() + 2, logp.end()), {}, whole);
  ASSERT_TRUE(all.ok() && a.ok() && b.ok());
  EXPECT_NEAR(a->loss + b->loss, all->loss, 1e-12);
  EXPECT_FLOAT_EQ(b->coef[0][1], all->coef[2][1]);
}

TEST(OpdLoss, RefusesMissingTeacherLogprobs) {
  auto g = groups();
  g[1].completions[0].teacher_logp.clear();
  const TokenLogprobs logp = {{0, -1.f, -2.f}, {0, -7.f, -0.25f}, {0, -1.5f}};
  auto l = opd_loss(g, logp, {});
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("group 1 completion 0"), std::string::npos) << l.status().message();
}

}  // namespace
}  // namespace kiln
