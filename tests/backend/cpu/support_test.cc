// A support predicate that says yes must not be contradicted by its method, and a request the
// predicate declines must be refused by the method with kUnsupported naming it.
#include <gtest/gtest.h>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

using testing::random_tensor;

TEST(CpuSupport, MatmulPredicateAgreesWithMethod) {
  auto be = std::move(create_backend("cpu").value());
  struct Case {
    DType x, w;
  } cases[] = {{DType::kF32, DType::kF32}, {DType::kF32, DType::kBF16}, {DType::kF32, DType::kF16},
               {DType::kBF16, DType::kBF16}, {DType::kF32, DType::kI32}};
  for (const auto& c : cases) {
    Tensor x = random_tensor({2, 8}, 1, 1.f, c.x == DType::kF32 ? DType::kF32 : c.x);
    Tensor w = c.w == DType::kI32 ? Tensor::empty({4, 8}, DType::kI32) : random_tensor({4, 8}, 2, 1.f, c.w);
    Tensor y = Tensor::empty({2, 4}, DType::kF32);
    MatmulArgs a{x, w, y};
    Support s = be->linear().supports(describe(a));
    Status st = be->linear().matmul(a);
    if (s.runs_natively()) {
      EXPECT_TRUE(st.ok()) << describe(a).describe() << ": " << st.to_string();
    } else {
      EXPECT_EQ(st.code(), ErrorCode::kUnsupported) << describe(a).describe();
      EXPECT_NE(st.message().find("matmul m=2 n=4 k=8"), std::string::npos);
      EXPECT_FALSE(s.constraint.empty());
    }
  }
}

TEST(CpuSupport, GdnAndAttentionDeclineWhatTheyCannotRun) {
  auto be = std::move(create_backend("cpu").value());
  GdnRequest g;
  g.k_heads = 3;
  g.v_heads = 4;  // not a multiple
  EXPECT_EQ(be->gdn().supports(g).state, SupportState::kDeclined);
  g.k_heads = 2;
  EXPECT_TRUE(be->gdn().supports(g).runs_natively());
  g.state_dtype = DType::kBF16;
  EXPECT_EQ(be->gdn().supports(g).state, SupportState::kDeclined);

  AttentionRequest a;
  a.q_heads = 6;
  a.kv_heads = 4;
  EXPECT_EQ(be->attention().supports(a).state, SupportState::kDeclined);
  a.kv_heads = 2;
  EXPECT_TRUE(be->attention().supports(a).runs_natively());
  RopeRequest r{1, 2, 16, 5};
  EXPECT_EQ(be->attention().supports(r).state, SupportState::kDeclined);
}

}  // namespace
}  // namespace kiln
