// KILN_CUDA_MEMORY_LIMIT_GB on the device: the backend reports the limit as its memory, its pools
// refuse an allocation over their share with the numbers and stay usable (a freed block is used
// again, the cache is given back for a larger one), memory_usage counts against the limit, a bad
// value stops the backend naming the variable; and the memory a process holds outside the pools
// stays within the allowance the limit sets aside for it.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/device_memory_limit.h"

namespace kiln {
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// Sets the variable for one scope (the backend reads it when it is made).
struct LimitEnv {
  explicit LimitEnv(const char* v) { ::setenv(kCudaMemoryLimitEnv, v, 1); }
  ~LimitEnv() { ::unsetenv(kCudaMemoryLimitEnv); }
};

TEST(CudaMemoryLimit, AnAllocationOverTheLimitIsRefusedWithTheNumbersAndThePoolStaysUsable) {
  LimitEnv env("2");  // the pools' share: 2 GiB - 0.75 GiB = 1.25 GiB
  KILN_CUDA_OR_SKIP(be);
  EXPECT_EQ(be->capabilities().storage.device_memory_bytes, uint64_t{2} << 30);
  EXPECT_NE(be->identity().device_name.find("limited to 2.00 GiB"), std::string::npos) << be->identity().device_name;
  StorageFacet& st = be->storage();
  auto first = st.empty({kGiB}, DType::kU8);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  auto over = st.empty({kGiB}, DType::kU8);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), ErrorCode::kResourceExhausted);
  for (const char* part : {"cannot allocate 1.00 GiB", "would hold 2.00 GiB", "over their 1.25 GiB under "
                           "KILN_CUDA_MEMORY_LIMIT_GB (2.00 GiB", "1.00 GiB in use"})
    EXPECT_NE(over.status().message().find(part), std::string::npos) << part << " not in: " << over.status().message();
  // Still usable: what fits is given, and memory_usage counts against the limit.
  auto small = st.allocate({int64_t{32} << 20}, DType::kF32);  // 128 MiB, zero-filled (a kernel runs)
  ASSERT_TRUE(small.ok()) << small.status().to_string();
  ASSERT_TRUE(st.synchronize().ok());
  const MemoryUsage m = be->memory_usage();
  EXPECT_EQ(m.total_bytes, 2 * kGiB);
  EXPECT_EQ(m.used_bytes, static_cast<int64_t>(kCudaOutsidePoolBytes) + kGiB + (int64_t{128} << 20));
  // The freed gibibyte comes back from the cache; a larger block takes the cache's place.
  first = Tensor();
  auto again = st.empty({kGiB}, DType::kU8);
  ASSERT_TRUE(again.ok()) << again.status().to_string();
  again = Tensor();
  small = Tensor();
  auto larger = st.empty({kGiB + kGiB / 5}, DType::kU8);
  ASSERT_TRUE(larger.ok()) << larger.status().to_string();
  const CudaBackendStats s = cuda_backend_stats(*be).value();
  EXPECT_EQ(s.pool_limit_bytes, (uint64_t{2} << 30) - kCudaOutsidePoolBytes);
  EXPECT_LE(s.pool_reserved_bytes + s.recording_pool_reserved_bytes, s.pool_limit_bytes);
  EXPECT_GE(s.pool_reserved_bytes, static_cast<uint64_t>(kGiB + kGiB / 5));
}

TEST(CudaMemoryLimit, ABadValueStopsTheBackendNamingTheVariable) {
  {
    KILN_CUDA_OR_SKIP(probe);  // skips where there is no device at all
  }
  LimitEnv env("24GB");
  auto be = create_backend("cuda");
  ASSERT_FALSE(be.ok());
  EXPECT_NE(be.status().message().find("KILN_CUDA_MEMORY_LIMIT_GB=\"24GB\""), std::string::npos)
      << be.status().message();
}

TEST(CudaMemoryLimit, WithoutTheVariableTheDeviceIsReportedWhole) {
  ::unsetenv(kCudaMemoryLimitEnv);
  KILN_CUDA_OR_SKIP(be);
  cudaDeviceProp p{};
  ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
  EXPECT_EQ(be->capabilities().storage.device_memory_bytes, p.totalGlobalMem);
  EXPECT_EQ(cuda_backend_stats(*be).value().pool_limit_bytes, 0u);
}

TEST(CudaMemoryLimit, WhatTheProcessHoldsOutsideThePoolsFitsTheAllowance) {
  // After a cuBLASLt matmul and a cuBLAS training GEMM (their handles and workspaces), the device
  // memory in use less the pools' blocks is the context, its modules and the handles: at most
  // kCudaOutsidePoolBytes. Other processes on the device would count too: run it on an idle one.
  LimitEnv env("8");
  KILN_CUDA_OR_SKIP(be);
  using testing::random_tensor;
  using testing::to_device;
  Tensor x = to_device(*be, random_tensor({64, 256}, 1, 1.f, DType::kF32));
  Tensor w = to_device(*be, random_tensor({512, 256}, 2, 1.f, DType::kBF16));
  Tensor y = be->storage().allocate({64, 512}, DType::kF32).value();
  ASSERT_TRUE(be->linear().matmul({x, w, y}).ok());
  Tensor dx = be->storage().allocate({64, 256}, DType::kF32).value();
  ASSERT_TRUE(be->training().gemm({y, w, dx}).ok());
  ASSERT_TRUE(be->storage().synchronize().ok());
  const CudaBackendStats s = cuda_backend_stats(*be).value();
  const uint64_t outside = s.device_used_bytes - s.pool_reserved_bytes - s.recording_pool_reserved_bytes;
  std::printf("outside the pools: %.1f MiB of the %.0f MiB allowance (device %s)\n", static_cast<double>(outside) / (1 << 20),
              static_cast<double>(kCudaOutsidePoolBytes) / (1 << 20), be->identity().device_name.c_str());
  EXPECT_LE(outside, kCudaOutsidePoolBytes);
}

}  // namespace
}  // namespace kiln
