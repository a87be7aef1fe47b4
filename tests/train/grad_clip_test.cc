// Clipping by the global gradient norm: the optimizer facet's sum of squares over several tensors,
// the step with OptimizerHyper::grad_scale equal to the step on the gradient scaled beforehand (bit
// for bit, every optimizer), and clip_by_global_norm's scale and refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "backend/declining_training.h"
#include "backend/registry.h"
#include "train/grad_clip.h"

namespace kiln {
namespace {

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

Tensor host(const std::vector<float>& v, Shape shape) { return Tensor::from_values(v, shape); }
std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

TEST(GradClip, SumSquaresAddsEveryElementOfEveryTensor) {
  auto be = cpu();
  // 3^2 + 4^2 + 12^2 + 0.5^2 = 169.25; a view into a larger buffer counts only its own elements.
  const Tensor big = host({9.f, 12.f, 0.5f, 9.f}, {4});
  const std::vector<Tensor> ts = {host({3.f, 4.f}, {1, 2}), big.slice(0, 1, 3)};
  auto s = be->optimizer().sum_squares(ts);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(*s, 169.25);
  EXPECT_EQ(be->optimizer().sum_squares({}).value(), 0.0);
}

TEST(GradClip, SumSquaresRefusesATensorItCannotReadNamingIt) {
  auto be = cpu();
  const std::vector<Tensor> ts = {host({1.f}, {1}), Tensor::empty({2}, DType::kBF16)};
  auto s = be->optimizer().sum_squares(ts);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("tensor 1"), std::string::npos) << s.status().to_string();
  DecliningOptimizer declining("this backend does not train");
  auto d = declining.sum_squares(ts);
  EXPECT_EQ(d.status().code(), ErrorCode::kUnsupported);
  EXPECT_NE(d.status().message().find("this backend does not train"), std::string::npos) << d.status().to_string();
}

// For each optimizer, two steps from the same state: one on g with grad_scale s, one on g * s
// (rounded to f32 here, as the step rounds it) with scale 1. Parameters and state agree exactly.
TEST(GradClip, AScaledStepIsTheStepOnTheScaledGradient) {
  auto be = cpu();
  const float scale = 0.3712f;
  const std::vector<float> g = {0.5f, -1.25f, 2.f, 0.125f, -0.75f, 3.f};
  std::vector<float> gs;
  for (float x : g) gs.push_back(x * scale);
  for (OptimizerKind kind : {OptimizerKind::kMuon, OptimizerKind::kAdamW, OptimizerKind::kSgd}) {
    Tensor p1 = host({1, 2, 3, 4, 5, 6}, {2, 3}), p2 = host({1, 2, 3, 4, 5, 6}, {2, 3});
    Tensor m1 = host(std::vector<float>(6, 0.1f), {2, 3}), m2 = host(std::vector<float>(6, 0.1f), {2, 3});
    Tensor v1 = host(std::vector<float>(6, 0.2f), {2, 3}), v2 = host(std::vector<float>(6, 0.2f), {2, 3});
    OptimizerStepArgs a{kind, p1, host(g, {2, 3}), m1, v1, {}, 2};
    a.hyper.lr = 0.01f;
    a.hyper.weight_decay = 0.1f;
    a.hyper.grad_scale = scale;
    OptimizerStepArgs b{kind, p2, host(gs, {2, 3}), m2, v2, a.hyper, 2};
    b.hyper.grad_scale = 1.f;
    ASSERT_TRUE(be->optimizer().step(a).ok());
    ASSERT_TRUE(be->optimizer().step(b).ok());
    const std::string name(optimizer_kind_name(kind));
    EXPECT_EQ(values(p1), values(p2)) << name;
    EXPECT_EQ(values(m1), values(m2)) << name;
    EXPECT_EQ(values(v1), values(v2)) << name;
    EXPECT_NE(values(p1), (std::vector<float>{1, 2, 3, 4, 5, 6})) << name << " did not move";
  }
}

TEST(GradClip, TheStepRefusesAGradScaleThatIsNotPositiveAndFinite) {
  auto be = cpu();
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::infinity()}) {
    OptimizerStepArgs a{OptimizerKind::kSgd, host({1.f}, {1}), host({1.f}, {1}), {}, {}, {}, 1};
    a.hyper.grad_scale = bad;
    const Status st = be->optimizer().step(a);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(st.message().find("grad_scale"), std::string::npos) << st.to_string();
  }
}

TEST(GradClip, ScalesToMaxNormOnlyAboveIt) {
  auto be = cpu();
  const std::vector<Tensor> grads = {host({3.f}, {1}), host({4.f}, {1})};  // norm 5
  auto under = clip_by_global_norm(be->optimizer(), grads, 10.0);
  ASSERT_TRUE(under.ok());
  EXPECT_EQ(under->norm, 5.0);
  EXPECT_EQ(under->scale, 1.f);
  auto over = clip_by_global_norm(be->optimizer(), grads, 1.0);
  ASSERT_TRUE(over.ok());
  EXPECT_EQ(over->norm, 5.0);
  EXPECT_FLOAT_EQ(over->scale, 0.2f);  // 1 / (5 + 1e-6)
  EXPECT_LT(over->scale * 5.0, 1.0);   // the clipped norm lands just under max_norm
  auto off = clip_by_global_norm(be->optimizer(), grads, 0.0);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->norm, 5.0);
  EXPECT_EQ(off->scale, 1.f);
}

TEST(GradClip, ANonFiniteNormIsAnError) {
  auto be = cpu();
  const std::vector<Tensor> grads = {host({1.f, std::numeric_limits<float>::quiet_NaN()}, {2})};
  auto r = clip_by_global_norm(be->optimizer(), grads, 1.0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("gradient norm is not finite"), std::string::npos) << r.status().to_string();
}

}  // namespace
}  // namespace kiln
