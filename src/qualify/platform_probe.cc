#include "qualify/platform_probe.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "backend/registry.h"
#include "qualify/environment_filter.h"
#include "qualify/process.h"

namespace kiln::qualify {
namespace {

std::string trim(std::string s) {
  size_t a = s.find_first_not_of(" \t\r\n\"");
  size_t b = s.find_last_not_of(" \t\r\n\"");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

std::optional<std::string> key_value(const std::string& file, const std::string& key, char sep) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    size_t at = line.find(sep);
    if (at == std::string::npos) continue;
    if (trim(line.substr(0, at)) == key) return trim(line.substr(at + 1));
  }
  return std::nullopt;
}

void probe_host(PlatformFacts& f) {
  utsname u{};
  if (uname(&u) == 0) {
    f.os_name = u.sysname;
    f.os_release = u.release;
    f.os_version = u.version;
    f.machine = u.machine;
  } else {
    f.unsupported.push_back({"os", "uname() failed"});
  }
  f.distribution = key_value("/etc/os-release", "PRETTY_NAME", '=');
  if (!f.distribution) f.unsupported.push_back({"os.distribution", "/etc/os-release has no PRETTY_NAME"});
  f.cpu_model = key_value("/proc/cpuinfo", "model name", ':');
  if (!f.cpu_model) f.unsupported.push_back({"host.cpu_model", "/proc/cpuinfo has no \"model name\""});
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  f.logical_cpus = n > 0 ? static_cast<int>(n) : 0;
  if (auto mem = key_value("/proc/meminfo", "MemTotal", ':')) {
    std::istringstream ss(*mem);
    uint64_t kib = 0;
    if (ss >> kib) f.memory_bytes = kib * 1024;
  }
  if (!f.memory_bytes) f.unsupported.push_back({"host.memory_bytes", "/proc/meminfo has no MemTotal"});
#if defined(__clang__)
  f.compiler_id = "clang";
#elif defined(__GNUC__)
  f.compiler_id = "gcc";
#else
  f.compiler_id = "unknown";
#endif
  f.compiler_version = __VERSION__;
}

std::optional<std::string> run_tool(const std::vector<std::string>& argv, std::string* why) {
  ProcessSpec spec;
  spec.argv = argv;
  spec.working_directory.assign(1, '/');  // probes do not depend on the caller's directory
  spec.environment = filtered_environment();
  spec.timeout_seconds = 30;
  spec.capture_limit_bytes = 1u << 20;
  Result<ProcessOutcome> o = run_process(spec);
  if (!o.ok()) {
    *why = o.status().message();
    return std::nullopt;
  }
  if (!o->started) {
    *why = o->start_error;
    return std::nullopt;
  }
  if (!o->exited || o->exit_code != 0) {
    std::string message = argv[0];
    message += " exited with " + std::to_string(o->exit_code) + ": ";
    message += trim(o->combined_text);
    *why = std::move(message);
    return std::nullopt;
  }
  return o->stdout_text;
}

void probe_cuda(PlatformFacts& f) {
  std::string why;
  std::optional<std::string> out = run_tool(
      {"nvidia-smi", "--query-gpu=name,memory.total,driver_version,compute_cap", "--format=csv,noheader,nounits"}, &why);
  if (!out) {
    f.unsupported.push_back({"device", why});
    return;
  }
  std::istringstream lines(*out);
  std::string line;
  while (std::getline(lines, line)) {
    if (trim(line).empty()) continue;
    DeviceFacts d;
    if (!parse_nvidia_smi_line(line, d)) {
      f.unsupported.push_back({"device", "unparseable nvidia-smi line: " + line});
      continue;
    }
    if (f.device.count == 0) {  // the first visible device is the one CUDA selects by default
      f.device = d;
      if (!d.memory_bytes) f.unsupported.push_back({"device.memory_bytes", "nvidia-smi reports no memory size"});
      if (!d.driver) f.unsupported.push_back({"device.driver", "nvidia-smi reports no driver version"});
      if (!d.architecture) f.unsupported.push_back({"device.architecture", "nvidia-smi reports no compute capability"});
    }
    f.device.count += 1;
  }
  f.device.available = f.device.count > 0;
  if (!f.device.available) f.unsupported.push_back({"device", "nvidia-smi lists no GPU"});
  std::optional<std::string> banner = run_tool({"nvidia-smi"}, &why);
  size_t at = banner ? banner->find("CUDA Version:") : std::string::npos;
  if (at != std::string::npos) {
    std::istringstream ss(banner->substr(at + 13));
    std::string version;
    ss >> version;
    f.runtime_name = "cuda";
    f.runtime_version = version;
  } else {
    f.unsupported.push_back({"runtime", "nvidia-smi does not report a CUDA version"});
  }
}

// The device the Vulkan backend would choose (vulkan.device through KILN_VULKAN_DEVICE), asked
// in this process: its name, the target it compiles for, its device-local memory and driver.
void probe_vulkan(PlatformFacts& f) {
  Result<std::unique_ptr<Backend>> be = create_backend("vulkan");
  if (!be.ok()) {
    f.unsupported.push_back({"device", be.status().message()});
    return;
  }
  const BackendIdentity& id = (*be)->identity();
  const BackendCapabilities& caps = (*be)->capabilities();
  f.device.available = true;
  f.device.count = 1;
  f.device.name = id.device_name;
  f.device.architecture = caps.compute.target;
  if (caps.storage.device_memory_bytes > 0) f.device.memory_bytes = caps.storage.device_memory_bytes;
  else f.unsupported.push_back({"device.memory_bytes", "the device reports no device-local heap"});
  f.device.driver = id.driver;
  f.runtime_name = "vulkan";
  const std::string& t = caps.compute.target;  // "vulkan 1.3, subgroup 32, ..."
  const size_t sp = t.find(' '), comma = t.find(',');
  f.runtime_version = sp == std::string::npos ? t : t.substr(sp + 1, comma == std::string::npos ? std::string::npos : comma - sp - 1);
}

}  // namespace

bool parse_nvidia_smi_line(const std::string& line, DeviceFacts& d) {
  std::vector<std::string> fields;
  std::stringstream ss(line);
  std::string field;
  while (std::getline(ss, field, ',')) fields.push_back(trim(field));
  if (fields.size() != 4 || fields[0].empty()) return false;
  d.name = fields[0];
  // Fields nvidia-smi cannot report read "[N/A]": they stay empty rather than guessed.
  if (!fields[1].empty() && fields[1].find_first_not_of("0123456789") == std::string::npos) {
    d.memory_bytes = static_cast<uint64_t>(std::stoull(fields[1])) * 1024 * 1024;
  }
  if (!fields[2].empty() && fields[2][0] != '[') d.driver = fields[2];
  size_t dot = fields[3].find('.');
  if (dot != std::string::npos && fields[3][0] != '[') {
    d.architecture = "sm_" + fields[3].substr(0, dot) + fields[3].substr(dot + 1);
  }
  return true;
}

PlatformFacts probe_platform(const std::string& backend) {
  PlatformFacts f;
  probe_host(f);
  if (backend == "cpu") {
    f.device.available = true;
    f.device.count = 1;
    f.device.name = f.cpu_model;
    f.device.architecture = f.machine;
    f.device.memory_bytes = f.memory_bytes;
    f.unsupported.push_back({"device.driver", "the cpu backend has no driver"});
    f.unsupported.push_back({"runtime", "the cpu backend has no accelerator runtime"});
  } else if (backend == "cuda") {
    probe_cuda(f);
  } else if (backend == "vulkan") {
    probe_vulkan(f);
  } else {
    f.unsupported.push_back({"device", "this build has no probe for backend " + backend});
  }
  return f;
}

}  // namespace kiln::qualify
