// LinearFacet::lora_delta on the CPU (the f32 reference the CUDA kernels are held to) and its
// default implementation through matmul, against the double-precision definition over segment
// layouts: disjoint runs with gaps, stacked adapters on one run, strided x and out, f32 / bf16 /
// f16 factors, zero coefficients and empty segments, decode-sized and longer segments. Then bad
// arguments, each named. Tolerance 1e-5 of the largest delta: f32 dot products of at most 256
// terms against exact ones (factors in 16 bits are widened exactly, u stays f32).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "backend/lora_delta_cases.h"
#include "backend/registry.h"

namespace kiln {
namespace {

using testing::LoraDeltaCase;
using testing::lora_error;
using testing::lora_reference;
using testing::make_lora_inputs;

constexpr double kTol = 1e-5;
constexpr DType F = DType::kF32, H = DType::kBF16, G = DType::kF16;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

std::vector<LoraDeltaCase> cases() {
  return {
      {"disjoint_with_gaps", 9, 64, 48, {{0, 3, 4, F, F, 2.f}, {3, 4, 8, F, F, 0.5f}, {6, 9, 4, F, F, -1.f}}},
      {"stacked", 6, 96, 40, {{0, 6, 8, F, F, 2.f}, {0, 6, 4, H, H, 0.25f}, {2, 3, 16, F, F, 1.f}}},
      {"strided_x_and_out", 5, 64, 33, {{0, 2, 8, H, H, 1.5f}, {2, 5, 8, G, G, -0.75f}}, 7, 5},
      {"zero_coef_and_empty", 4, 32, 16, {{0, 4, 4, F, F, 0.f}, {1, 1, 4, F, F, 3.f}, {0, 4, 2, F, F, 1.f}}},
      {"decode_rows_own_adapters", 8, 256, 128,
       {{0, 1, 8, H, H, 2.f}, {1, 2, 16, H, H, 2.f}, {2, 3, 8, F, F, 1.f}, {4, 5, 4, G, G, 0.5f},
        {5, 6, 8, H, H, 2.f}, {5, 6, 8, F, F, -1.f}, {7, 8, 16, H, F, 1.f}}},
      {"long_segment", 40, 64, 72, {{0, 40, 8, H, H, 2.f}, {10, 30, 4, F, F, 0.5f}}, 4, 3},
  };
}

TEST(CpuLoraDelta, MatchesDoubleReference) {
  auto be = cpu();
  uint32_t seed = 1;
  for (const LoraDeltaCase& c : cases()) {
    auto in = make_lora_inputs(c, seed);
    seed += 100;
    const Tensor before = testing::host_copy(in.out_base);
    const std::vector<double> want = lora_reference(in, c);
    Status st = be->linear().lora_delta({in.x, in.out, in.segments});
    ASSERT_TRUE(st.ok()) << c.name << ": " << st.to_string();
    EXPECT_LE(lora_error(in.out_base, want, before), kTol) << c.name;
  }
}

// The facet's own default (matmul, scaling through coef * I).
TEST(CpuLoraDelta, DefaultThroughMatmulMatchesDoubleReference) {
  auto be = cpu();
  testing::MatmulOnlyLinear lin(be->linear());
  uint32_t seed = 7;
  for (const LoraDeltaCase& c : cases()) {
    auto in = make_lora_inputs(c, seed);
    seed += 100;
    const Tensor before = testing::host_copy(in.out_base);
    const std::vector<double> want = lora_reference(in, c);
    LoraDeltaArgs a{in.x, in.out, in.segments};
    Status no_storage = lin.lora_delta(a);
    EXPECT_EQ(no_storage.code(), ErrorCode::kInvalidArgument) << c.name;
    EXPECT_NE(no_storage.message().find("storage"), std::string::npos) << no_storage.to_string();
    a.storage = &be->storage();
    Status st = lin.lora_delta(a);
    ASSERT_TRUE(st.ok()) << c.name << ": " << st.to_string();
    EXPECT_LE(lora_error(in.out_base, want, before), kTol) << c.name;
  }
}

// LoraDeltaArgs::u (a traced forward's): x A^T of the one segment over every token, unscaled,
// from the CPU facet and the default through matmul alike, the delta unchanged; asked for with
// two segments or in the wrong shape, it is refused by name before anything is written.
TEST(CpuLoraDelta, KeepsXATransposedOfItsOneSegment) {
  auto be = cpu();
  testing::MatmulOnlyLinear through_matmul(be->linear());
  const LoraDeltaCase one{"one", 6, 32, 16, {{0, 6, 4, F, F, 2.f}}, 40};
  for (LinearFacet* lin : {&be->linear(), static_cast<LinearFacet*>(&through_matmul)}) {
    auto in = make_lora_inputs(one, 11);
    const Tensor before = testing::host_copy(in.out_base);
    const std::vector<double> want = lora_reference(in, one);
    LoraDeltaArgs a{in.x, in.out, in.segments};
    a.storage = &be->storage();
    a.u = Tensor::empty({6, 4}, F);
    Status st = lin->lora_delta(a);
    ASSERT_TRUE(st.ok()) << st.to_string();
    EXPECT_LE(lora_error(in.out_base, want, before), kTol);
    const Tensor& A = in.segments[0].a;
    double worst = 0, largest = 0;
    for (int64_t t = 0; t < 6; ++t)
      for (int64_t j = 0; j < 4; ++j) {
        double u = 0;
        for (int64_t k = 0; k < 32; ++k)
          u += double(in.x.data<float>()[t * in.x.stride(0) + k]) * double(A.data<float>()[j * 32 + k]);
        worst = std::max(worst, std::abs(u - double(a.u.data<float>()[t * 4 + j])));
        largest = std::max(largest, std::abs(u));
      }
    EXPECT_GT(largest, 0.1);
    EXPECT_LE(worst, kTol * largest);
  }
  const LoraDeltaCase two{"two", 6, 32, 16, {{0, 3, 4, F, F, 1.f}, {3, 6, 4, F, F, 1.f}}};
  struct Bad {
    const LoraDeltaCase& c;
    Shape u;
    const char* expect;
  };
  for (const Bad& b : {Bad{two, {6, 4}, "2 segments"}, Bad{one, {6, 5}, "tensor 'u'"}, Bad{one, {5, 4}, "tensor 'u'"}}) {
    auto in = make_lora_inputs(b.c, 5);
    const Tensor before = testing::host_copy(in.out_base);
    LoraDeltaArgs a{in.x, in.out, in.segments};
    a.u = Tensor::empty(b.u, F);
    Status st = be->linear().lora_delta(a);
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << st.to_string();
    EXPECT_NE(st.message().find(b.expect), std::string::npos) << st.to_string();
    EXPECT_EQ(testing::max_abs_diff(in.out_base.data<float>(), before.data<float>(), before.numel()), 0);
  }
}

// Each malformed call is refused before anything is written, naming the segment and the tensor.
TEST(CpuLoraDelta, BadArgumentsNameTheSegmentAndTensor) {
  auto be = cpu();
  const LoraDeltaCase ok{"ok", 4, 32, 16, {{0, 2, 4, F, F, 1.f}, {2, 4, 4, H, H, 1.f}}};
  struct Bad {
    const char* what;
    std::function<void(testing::LoraDeltaInputs&)> mutate;
    std::vector<std::string> expect;  // substrings of the message
  };
  const Bad bad[] = {
      {"segment past the tokens", [](auto& in) { in.segments[1].end = 5; }, {"segment 1", "[2, 5)", "4 rows"}},
      {"negative begin", [](auto& in) { in.segments[0].begin = -1; }, {"segment 0", "outside"}},
      {"rank mismatch", [](auto& in) { in.segments[0].b = Tensor::empty({16, 3}, DType::kF32); },
       {"segment 0", "tensor 'b'", "rank 4"}},
      {"in width", [](auto& in) { in.segments[1].a = Tensor::empty({4, 33}, DType::kBF16); },
       {"segment 1", "tensor 'a'", "32 columns"}},
      {"out width", [](auto& in) { in.segments[0].b = Tensor::empty({17, 4}, DType::kF32); },
       {"segment 0", "tensor 'b'", "16 columns"}},
      {"missing factor", [](auto& in) { in.segments[1].b = Tensor(); }, {"segment 1", "tensor 'b' is missing"}},
      {"integer factor", [](auto& in) { in.segments[0].a = Tensor::empty({4, 32}, DType::kI32); },
       {"segment 0", "tensor 'a'", "f32, bf16 or f16"}},
      {"x not f32", [](auto& in) { in.x = Tensor::empty({4, 32}, DType::kBF16); }, {"tensor 'x'", "f32"}},
      {"out rows", [](auto& in) { in.out = Tensor::empty({3, 16}, DType::kF32); }, {"'out'"}},
      {"coef", [](auto& in) { in.segments[0].coef = NAN; }, {"segment 0", "coef"}},
  };
  for (const Bad& b : bad) {
    auto in = make_lora_inputs(ok, 3);
    b.mutate(in);
    const Tensor before = testing::host_copy(in.out_base);
    Status st = be->linear().lora_delta({in.x, in.out, in.segments});
    EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument) << b.what << ": " << st.to_string();
    EXPECT_NE(st.message().find("lora_delta tokens="), std::string::npos) << b.what << ": " << st.to_string();
    for (const std::string& s : b.expect)
      EXPECT_NE(st.message().find(s), std::string::npos) << b.what << ": '" << s << "' not in " << st.to_string();
    EXPECT_EQ(testing::max_abs_diff(in.out_base.data<float>(), before.data<float>(), before.numel()), 0) << b.what;
  }
}

}  // namespace
}  // namespace kiln
