// RMSNorm in every form (residual fused or not, strided rows, bf16 output) and argmax (ties,
// NaN, -inf) against the CPU reference.
#include <gtest/gtest.h>

#include <cmath>

#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using testing::converted;
using testing::random_tensor;
using testing::rel_error;
using testing::to_device;
using testing::to_host;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

constexpr double kF32Tol = 2e-5;  // f32 throughout; only the order of the sums differs

TEST(VulkanNorm, EveryKindEqualsCpuWithAndWithoutTheResidual) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  const int64_t rows = 5, width = 600;
  // x is a column slice of a wider tensor: strided rows.
  Tensor wide = random_tensor({rows, width + 40}, 1, 2.f);
  Tensor x = wide.slice(1, 20, 20 + width);
  Tensor weight = random_tensor({width}, 2, 0.5f), gate = random_tensor({rows, width}, 3, 2.f);
  Tensor dwide = to_device(*be, wide), dweight = to_device(*be, weight), dgate = to_device(*be, gate);
  Tensor dx = dwide.slice(1, 20, 20 + width);
  for (NormKind kind : {NormKind::kOnePlus, NormKind::kPlain, NormKind::kGated}) {
    for (bool fused : {false, true}) {
      if (kind == NormKind::kGated && fused) continue;
      SCOPED_TRACE(std::string(norm_kind_name(kind)) + (fused ? " +residual" : ""));
      Tensor res = random_tensor({rows, width}, 4, 1.f), want = Tensor::empty({rows, width}, DType::kF32);
      Tensor dres = to_device(*be, res);
      NormArgs ra{kind, x, fused ? res : Tensor(), weight, kind == NormKind::kGated ? gate : Tensor(), want, 1e-6f};
      ASSERT_TRUE(ref->norm().rms_norm(ra).ok());
      Tensor out = be->storage().allocate({rows, width}, DType::kF32).value();
      NormArgs va{kind, dx, fused ? dres : Tensor(), dweight, kind == NormKind::kGated ? dgate : Tensor(), out, 1e-6f};
      Status s = be->norm().rms_norm(va);
      ASSERT_TRUE(s.ok()) << s.to_string();
      EXPECT_LT(rel_error(to_host(*be, out), want), kF32Tol);
      if (fused) {
        EXPECT_LT(rel_error(to_host(*be, dres), res), 1e-7);  // residual += x, exactly
      }
    }
  }
}

TEST(VulkanNorm, Bf16OutputIsTheRoundedF32Result) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor x = to_device(*be, random_tensor({3, 256}, 5, 3.f)), w = to_device(*be, random_tensor({256}, 6));
  Tensor f32 = be->storage().allocate({3, 256}, DType::kF32).value();
  Tensor b16 = be->storage().allocate({3, 256}, DType::kBF16).value();
  ASSERT_TRUE(be->norm().rms_norm({NormKind::kOnePlus, x, Tensor(), w, Tensor(), f32, 1e-6f}).ok());
  ASSERT_TRUE(be->norm().rms_norm({NormKind::kOnePlus, x, Tensor(), w, Tensor(), b16, 1e-6f}).ok());
  Tensor want = converted(to_host(*be, f32), DType::kBF16), got = to_host(*be, b16);
  for (int i = 0; i < 3 * 256; ++i) ASSERT_EQ(got.data<uint16_t>()[i], want.data<uint16_t>()[i]) << i;
}

TEST(VulkanSampling, ArgmaxTakesTheFirstLargestAndNeverNaN) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  const int64_t vocab = 1000;
  Tensor logits = random_tensor({5, vocab}, 7, 4.f);
  float* l = logits.data<float>();
  l[0 * vocab + 700] = 50.f, l[0 * vocab + 300] = 50.f;  // a tie: 300 wins
  l[1 * vocab + 10] = NAN, l[1 * vocab + 11] = 60.f;      // NaN never wins
  for (int64_t j = 0; j < vocab; ++j) l[2 * vocab + j] = -INFINITY;  // all -inf: the first
  for (int64_t j = 0; j < vocab; ++j) l[3 * vocab + j] = NAN;        // all NaN: 0
  l[4 * vocab + vocab - 1] = 99.f;                                    // the last index
  Tensor want = Tensor::empty({5}, DType::kI32);
  ASSERT_TRUE(ref->sampling().argmax({logits, want}).ok());
  Tensor ids = be->storage().allocate({5}, DType::kI32).value();
  ASSERT_TRUE(be->sampling().argmax({to_device(*be, logits), ids}).ok());
  Tensor got = to_host(*be, ids);
  // Host logits are staged through the device: the same ids, on the host.
  Tensor host_ids = Tensor::empty({5}, DType::kI32);
  ASSERT_TRUE(be->sampling().argmax({logits, host_ids}).ok());
  const std::vector<int32_t> expect = {300, 11, 0, 0, static_cast<int32_t>(vocab - 1)};
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(want.data<int32_t>()[i], expect[i]) << i;
    EXPECT_EQ(got.data<int32_t>()[i], expect[i]) << i;
    EXPECT_EQ(host_ids.data<int32_t>()[i], expect[i]) << i;
  }
}

}  // namespace
}  // namespace kiln
