// Platform probes: the host facts come from the running machine, and the nvidia-smi line format
// is parsed exactly as an H200 reports it.
#include <gtest/gtest.h>

#include "qualify/platform_probe.h"

namespace kiln::qualify {
namespace {

TEST(NvidiaSmi, ParsesTheQueryLineOfAnH200) {
  DeviceFacts d;
  // Verbatim from `nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap
  // --format=csv,noheader,nounits` on the accelerator machine.
  ASSERT_TRUE(parse_nvidia_smi_line("NVIDIA H200, 143771, 580.159.04, 9.0", d));
  EXPECT_EQ(d.name, "NVIDIA H200");
  EXPECT_EQ(d.memory_bytes, uint64_t{143771} * 1024 * 1024);
  EXPECT_EQ(d.driver, "580.159.04");
  EXPECT_EQ(d.architecture, "sm_90");
}

TEST(NvidiaSmi, RejectsMalformedLines) {
  DeviceFacts d;
  EXPECT_FALSE(parse_nvidia_smi_line("NVIDIA H200, 143771, 580.159.04", d));
  EXPECT_FALSE(parse_nvidia_smi_line(", 1, 2, 9.0", d));
}

TEST(NvidiaSmi, UnavailableFieldsStayEmpty) {
  DeviceFacts d;
  ASSERT_TRUE(parse_nvidia_smi_line("NVIDIA H200 MIG 1g.18gb, [N/A], 580.159.04, [N/A]", d));
  EXPECT_EQ(d.name, "NVIDIA H200 MIG 1g.18gb");
  EXPECT_FALSE(d.memory_bytes.has_value());
  EXPECT_FALSE(d.architecture.has_value());
  EXPECT_EQ(d.driver, "580.159.04");
}

TEST(PlatformProbe, CpuBackendDescribesThisHostAndRecordsWhatItLacks) {
  PlatformFacts f = probe_platform("cpu");
  EXPECT_EQ(f.os_name, "Linux");
  EXPECT_GT(f.logical_cpus, 0);
  ASSERT_TRUE(f.memory_bytes.has_value());
  EXPECT_GT(*f.memory_bytes, 0u);
  EXPECT_TRUE(f.device.available);
  EXPECT_EQ(f.device.architecture, f.machine);
  EXPECT_FALSE(f.device.driver.has_value());
  bool driver_recorded = false;
  for (const Unsupported& u : f.unsupported) driver_recorded |= u.probe == "device.driver";
  EXPECT_TRUE(driver_recorded);
}

TEST(PlatformProbe, BackendWithoutAProbeInventsNothing) {
  PlatformFacts f = probe_platform("rocm");
  EXPECT_FALSE(f.device.available);
  EXPECT_FALSE(f.device.name.has_value());
  EXPECT_FALSE(f.device.memory_bytes.has_value());
  ASSERT_FALSE(f.unsupported.empty());
  EXPECT_EQ(f.unsupported.back().probe, "device");
}

}  // namespace
}  // namespace kiln::qualify
