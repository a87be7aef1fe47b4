#include <gtest/gtest.h>

#include "core/arena.h"
#include "core/tensor.h"

namespace kiln {
namespace {

TEST(Tensor, ContiguousStridesAndViews) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::kF32);
  EXPECT_EQ(t.stride(0), 12);
  EXPECT_EQ(t.stride(1), 4);
  EXPECT_EQ(t.stride(2), 1);
  EXPECT_TRUE(t.is_contiguous());
  for (int i = 0; i < 24; ++i) t.data<float>()[i] = static_cast<float>(i);

  Tensor s = t.slice(1, 1, 3);  // [2, 2, 4], starts at element 4
  EXPECT_EQ(s.shape(), Shape({2, 2, 4}));
  EXPECT_FALSE(s.is_contiguous());
  EXPECT_EQ(s.data<float>()[0], 4.f);
  EXPECT_EQ(s.data<float>()[s.stride(0)], 16.f);

  Tensor row = t.select(0, 1);  // [3, 4] starting at 12
  EXPECT_EQ(row.rank(), 2);
  EXPECT_EQ(row.data<float>()[0], 12.f);
  EXPECT_EQ(row.stride(0), 4);

  Tensor odd = t.as_strided({6, 2}, {4, 1}, 2);  // the last two of every row of 4
  EXPECT_EQ(odd.data<float>()[0], 2.f);
  EXPECT_EQ(odd.data<float>()[odd.stride(0) * 5 + 1], 23.f);

  Tensor r = t.reshape({6, 4});
  EXPECT_EQ(r.data<float>(), t.data<float>());
  EXPECT_EQ(r.describe(), "f32[6, 4]");
}

TEST(Tensor, EmptyIsZeroedAndAligned) {
  Tensor t = Tensor::empty({3, 5}, DType::kBF16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<uint16_t>()[i], 0);
  EXPECT_EQ(t.nbytes(), 30u);
}

TEST(HostArena, BumpAllocatesAlignedAndGrows) {
  HostArena arena(256);
  Tensor a = arena.alloc({10}, DType::kF32);  // 40 bytes -> 64
  Tensor b = arena.alloc({3}, DType::kF32);
  EXPECT_EQ(static_cast<char*>(b.raw()) - static_cast<char*>(a.raw()), 64);
  EXPECT_EQ(arena.used(), 128u);
  Tensor big = arena.alloc({1000}, DType::kF32);  // outgrows the block: a new one
  a.data<float>()[0] = 1.f;                      // the old block is still alive
  EXPECT_GE(arena.capacity(), 4000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big.raw()) % 64, 0u);
  arena.reset();
  EXPECT_EQ(arena.used(), 0u);
}

}  // namespace
}  // namespace kiln
