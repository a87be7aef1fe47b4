// The CPU storage facet: allocation, zeroing, host transfers and device copies are exact; misuse
// is refused.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/registry.h"
#include "test_util.h"

namespace kiln {
namespace {

TEST(CpuStorage, RoundTripIsExact) {
  auto be = std::move(create_backend("cpu").value());
  StorageFacet& s = be->storage();
  for (DType d : {DType::kF32, DType::kBF16, DType::kF16, DType::kI32, DType::kI64, DType::kU8}) {
    Tensor host = Tensor::empty({3, 7}, d);
    auto* bytes = static_cast<unsigned char*>(host.raw());
    for (size_t i = 0; i < host.nbytes(); ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    auto dev = s.allocate({3, 7}, d);
    ASSERT_TRUE(dev.ok());
    for (size_t i = 0; i < dev.value().nbytes(); ++i) EXPECT_EQ(static_cast<unsigned char*>(dev.value().raw())[i], 0);
    ASSERT_TRUE(s.copy_from_host(host, dev.value()).ok());
    Tensor back = Tensor::empty({3, 7}, d);
    ASSERT_TRUE(s.copy_to_host(dev.value(), back).ok());
    EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.nbytes()), 0) << dtype_name(d);
    ASSERT_TRUE(s.zero(dev.value()).ok());
    ASSERT_TRUE(s.copy_to_host(dev.value(), back).ok());
    for (size_t i = 0; i < back.nbytes(); ++i) EXPECT_EQ(static_cast<unsigned char*>(back.raw())[i], 0);
    auto up = s.upload(host);  // the CPU computes in place: no copy
    ASSERT_TRUE(up.ok());
    EXPECT_EQ(up.value().raw(), host.raw());
  }
}

TEST(CpuStorage, DeviceCopyIsExact) {
  auto be = std::move(create_backend("cpu").value());
  StorageFacet& s = be->storage();
  Tensor src = testing::random_tensor({3, 5}, 7);
  Tensor pool = s.allocate({4, 3, 5}, DType::kF32).value();
  ASSERT_TRUE(s.copy(src, pool.select(0, 2)).ok());
  EXPECT_EQ(std::memcmp(pool.select(0, 2).raw(), src.raw(), src.nbytes()), 0);
  EXPECT_EQ(pool.select(0, 1).data<float>()[0], 0.f);  // neighbours untouched
  Status st = s.copy(src.slice(1, 0, 2), pool.select(0, 0).slice(1, 0, 2));
  EXPECT_NE(st.message().find("copy: both tensors must be contiguous"), std::string::npos) << st.message();
  EXPECT_EQ(s.copy(src, pool.select(0, 0).slice(0, 0, 2)).code(), ErrorCode::kInvalidArgument);
}

TEST(CpuStorage, MisuseIsAClearError) {
  auto be = std::move(create_backend("cpu").value());
  StorageFacet& s = be->storage();
  Tensor a = Tensor::empty({4, 4}, DType::kF32), b = Tensor::empty({4, 4}, DType::kBF16);
  Status st = s.copy_from_host(a, b);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("f32[4, 4] does not match bf16[4, 4]"), std::string::npos) << st.message();
  st = s.copy_to_host(a.slice(1, 0, 2), Tensor::empty({4, 2}, DType::kF32));
  EXPECT_NE(st.message().find("contiguous"), std::string::npos);
  EXPECT_EQ(s.zero(a.slice(1, 1, 3)).code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace kiln
