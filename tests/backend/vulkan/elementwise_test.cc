// Embedding gather and the binary ops against the CPU reference: every table dtype, strided rows,
// bf16 output of silu_mul (bit-equal to rounding the f32 result), and the declines named.
#include <gtest/gtest.h>

#include "backend/elementwise_ops.h"
#include "backend/vulkan/vulkan_test_util.h"

namespace kiln {
namespace {

using testing::converted;
using testing::host_i32;
using testing::random_tensor;
using testing::rel_error;
using testing::to_device;
using testing::to_host;

std::unique_ptr<Backend> cpu() { return std::move(create_backend("cpu").value()); }

TEST(VulkanElementwise, EmbedEqualsCpuForEveryTableDtype) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  Tensor ids = host_i32({3, 0, 17, 3, 9});
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16}) {
    Tensor table = random_tensor({20, 40}, 7, 1.f, d);
    Tensor want = Tensor::empty({5, 40}, DType::kF32);
    ASSERT_TRUE(ref->elementwise().embed({ids, table, want}).ok());
    Tensor out = be->storage().allocate({5, 40}, DType::kF32).value();
    Status s = be->elementwise().embed({to_device(*be, ids), to_device(*be, table), out});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(rel_error(to_host(*be, out), want), 0.0) << dtype_name(d);  // widening is exact
  }
}

TEST(VulkanElementwise, BinaryOpsEqualCpuOnStridedRows) {
  KILN_VULKAN_OR_SKIP(be);
  auto ref = cpu();
  // a and b are the two halves of one [rows, 2 * width] tensor, as the MLP's gate and up.
  const int64_t rows = 7, width = 300;
  Tensor both = random_tensor({rows, 2 * width}, 11, 3.f);
  Tensor dboth = to_device(*be, both);
  for (const BinaryOpInfo& op : kBinaryOps) {
    Tensor want = Tensor::empty({rows, width}, DType::kF32);
    ASSERT_TRUE(ref->elementwise().binary({op.op, both.slice(1, 0, width), both.slice(1, width, 2 * width), want}).ok());
    Tensor out = be->storage().allocate({rows, width}, DType::kF32).value();
    Status s = be->elementwise().binary({op.op, dboth.slice(1, 0, width), dboth.slice(1, width, 2 * width), out});
    ASSERT_TRUE(s.ok()) << s.to_string();
    EXPECT_LT(rel_error(to_host(*be, out), want), 1e-6) << op.name;
  }
}

TEST(VulkanElementwise, SiluMulIntoBf16IsTheRoundedF32Result) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor a = random_tensor({4, 64}, 3, 2.f), b = random_tensor({4, 64}, 4, 2.f);
  Tensor f32 = be->storage().allocate({4, 64}, DType::kF32).value();
  Tensor b16 = be->storage().allocate({4, 64}, DType::kBF16).value();
  Tensor da = to_device(*be, a), db = to_device(*be, b);
  ASSERT_TRUE(be->elementwise().binary({ElementwiseOp::kSiluMul, da, db, f32}).ok());
  ASSERT_TRUE(be->elementwise().binary({ElementwiseOp::kSiluMul, da, db, b16}).ok());
  Tensor want = converted(to_host(*be, f32), DType::kBF16), got = to_host(*be, b16);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(got.data<uint16_t>()[i], want.data<uint16_t>()[i]) << i;
}

TEST(VulkanElementwise, AddIntoBf16IsDeclinedNamingTheRequest) {
  KILN_VULKAN_OR_SKIP(be);
  Tensor a = to_device(*be, random_tensor({2, 8}, 1));
  Tensor out = be->storage().allocate({2, 8}, DType::kBF16).value();
  Status s = be->elementwise().binary({ElementwiseOp::kAdd, a, a, out});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  EXPECT_NE(s.message().find("vulkan"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("add"), std::string::npos) << s.to_string();
}

}  // namespace
}  // namespace kiln
