// What the machine is, as far as it can be observed: OS, CPU, memory and, for an accelerator
// backend, the device. A probe that cannot observe something records it as unsupported (with
// the reason) and leaves the value empty; nothing is guessed or copied from elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace kiln::qualify {

struct Unsupported {
  std::string probe;   // e.g. "device.driver"
  std::string reason;  // e.g. "nvidia-smi not found on PATH"
};

struct DeviceFacts {
  bool available = false;  // a device of the selected backend was seen
  int count = 0;
  std::optional<std::string> name;
  std::optional<std::string> architecture;  // "x86_64" for cpu, "sm_90" for CUDA compute capability 9.0
  std::optional<uint64_t> memory_bytes;
  std::optional<std::string> driver;
};

struct PlatformFacts {
  std::string os_name, os_release, os_version, machine;
  std::optional<std::string> distribution;  // PRETTY_NAME of /etc/os-release
  std::optional<std::string> cpu_model;
  int logical_cpus = 0;
  std::optional<uint64_t> memory_bytes;
  DeviceFacts device;
  std::optional<std::string> runtime_name;     // "cuda" when a CUDA driver reports its API version
  std::optional<std::string> runtime_version;
  std::string compiler_id, compiler_version;  // what built this kiln binary
  std::vector<Unsupported> unsupported;
};

PlatformFacts probe_platform(const std::string& backend);

// Parses one line of `nvidia-smi --query-gpu=name,memory.total,driver_version,compute_cap
// --format=csv,noheader,nounits` into `d` (memory in MiB); "[N/A]" fields stay empty. False
// when the line does not have the four fields and a name.
bool parse_nvidia_smi_line(const std::string& line, DeviceFacts& d);

}  // namespace kiln::qualify
