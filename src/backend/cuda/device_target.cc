#include "backend/cuda/device_target.h"

#include <algorithm>

namespace kiln::cuda {

namespace {

struct Emulated {
  std::string_view name;
  int major, minor;
  int64_t shared_optin;
};

constexpr Emulated kEmulated[] = {
    {"sm80", 8, 0, kSharedOptinSm80},
    {"sm86", 8, 6, kSharedOptinSm86},
    {"sm89", 8, 9, kSharedOptinSm86},
    {"sm120", 12, 0, kSharedOptinSm86},
};

}  // namespace

std::string DeviceTarget::label() const {
  std::string s = "sm_" + std::to_string(major) + std::to_string(minor) + (sm90_features ? "a" : "");
  if (!emulated.empty())
    s += " (emulated on sm_" + std::to_string(device_major) + std::to_string(device_minor) + ")";
  return s;
}

Result<DeviceTarget> resolve_target(const DeviceFacts& device, std::string_view emulate, bool build_has_sm90a) {
  DeviceTarget t;
  t.name = device.name;
  t.major = t.device_major = device.major;
  t.minor = t.device_minor = device.minor;
  t.multiprocessors = device.multiprocessors;
  t.shared_optin = device.shared_optin;
  t.l2_bytes = device.l2_bytes;
  // The wgmma kernels are compiled for sm_90a alone; other architectures run the portable forms.
  t.sm90_features = device.major == 9 && build_has_sm90a;
  if (emulate.empty()) return t;
  const auto* e = std::find_if(std::begin(kEmulated), std::end(kEmulated),
                               [&](const Emulated& x) { return x.name == emulate; });
  if (e == std::end(kEmulated))
    return invalid_argument("KILN_CUDA_TARGET=" + std::string(emulate) +
                            ": not a target this build emulates (sm80, sm86, sm89 or sm120; unset for the device itself)");
  t.major = e->major;
  t.minor = e->minor;
  t.shared_optin = std::min(device.shared_optin, e->shared_optin);
  t.sm90_features = false;
  t.emulated = std::string(emulate);
  return t;
}

}  // namespace kiln::cuda
