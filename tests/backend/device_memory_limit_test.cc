// KILN_CUDA_MEMORY_LIMIT_GB: what the variable's text means (GiB, fractions allowed), what is
// refused (each message naming the variable and the text), the pools' share after the context's
// allowance, and the message a pool over its share refuses with.
#include <gtest/gtest.h>

#include <cstdlib>

#include "backend/device_memory_limit.h"

namespace kiln {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

TEST(DeviceMemoryLimit, WholeAndFractionalGiBLeaveThePoolsTheLimitLessTheContextAllowance) {
  auto l = parse_device_memory_limit("24");
  ASSERT_TRUE(l.ok()) << l.status().to_string();
  ASSERT_TRUE(l->has_value());
  EXPECT_EQ((*l)->limit_bytes, 24 * kGiB);
  EXPECT_EQ((*l)->pool_bytes, 24 * kGiB - (uint64_t{768} << 20));
  auto half = parse_device_memory_limit("47.5");
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  EXPECT_EQ((*half)->limit_bytes, 47 * kGiB + kGiB / 2);
}

TEST(DeviceMemoryLimit, AnEmptyValueIsNoLimit) {
  auto l = parse_device_memory_limit("");
  ASSERT_TRUE(l.ok());
  EXPECT_FALSE(l->has_value());
}

TEST(DeviceMemoryLimit, BadValuesAreRefusedNamingTheVariableAndTheText) {
  for (const char* bad : {"abc", "24GB", "24 ", " 24", "-1", "0", "0.0", "nan", "inf", "1e3", "2000000"}) {
    auto l = parse_device_memory_limit(bad);
    ASSERT_FALSE(l.ok()) << bad;
    EXPECT_EQ(l.status().code(), ErrorCode::kInvalidArgument) << bad;
    EXPECT_NE(l.status().message().find(std::string("KILN_CUDA_MEMORY_LIMIT_GB=\"") + bad + "\""), std::string::npos)
        << l.status().message();
  }
}

TEST(DeviceMemoryLimit, ALimitTheContextAllowanceFillsIsRefused) {
  auto l = parse_device_memory_limit("0.75");  // exactly the 768 MiB allowance
  ASSERT_FALSE(l.ok());
  EXPECT_NE(l.status().message().find("leaves nothing for the memory pools"), std::string::npos) << l.status().message();
  EXPECT_TRUE(parse_device_memory_limit("1").ok());
}

TEST(DeviceMemoryLimit, TheEnvironmentVariableIsRead) {
  ASSERT_EQ(::setenv(kCudaMemoryLimitEnv, "48", 1), 0);
  auto l = device_memory_limit_from_env();
  ASSERT_TRUE(l.ok() && l->has_value());
  EXPECT_EQ((*l)->limit_bytes, 48 * kGiB);
  ASSERT_EQ(::setenv(kCudaMemoryLimitEnv, "lots", 1), 0);
  EXPECT_FALSE(device_memory_limit_from_env().ok());
  ASSERT_EQ(::unsetenv(kCudaMemoryLimitEnv), 0);
  auto none = device_memory_limit_from_env();
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(DeviceMemoryLimit, TheRefusalNamesTheLimitTheRequestAndWhatIsInUse) {
  const DeviceMemoryLimit l = parse_device_memory_limit("24").value().value();
  const std::string m = over_limit_message(l, 2 * kGiB, 22 * kGiB, 21 * kGiB, kGiB);
  for (const char* part : {"cannot allocate 2.00 GiB (2147483648 bytes)", "would hold 24.00 GiB",
                           "over their 23.25 GiB under KILN_CUDA_MEMORY_LIMIT_GB (24.00 GiB, less 0.75 GiB",
                           "21.00 GiB in use, 1.00 GiB cached"})
    EXPECT_NE(m.find(part), std::string::npos) << part << " not in: " << m;
}

}  // namespace
}  // namespace kiln
