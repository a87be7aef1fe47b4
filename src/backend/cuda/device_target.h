// What the CUDA kernels are chosen for: the device's compute capability, the shared memory a block
// may opt into, its multiprocessors and L2, and whether the sm_90 features (wgmma, thread-block
// clusters, programmatic dependent launch) may be used. Every launcher and facet that picks a
// kernel form, a tile or a stage count reads these, never the device's name.
//
// KILN_CUDA_TARGET=sm80|sm86|sm89|sm120 narrows the real device's target to what such a device
// offers: its compute capability, its opt-in shared memory (163 KB on sm_80, 99 KB on the others)
// and no sm_90 features. On an H200 this runs the kernels an A100 or an RTX 4090 would run
// (less their smaller caches: the SM count and L2 stay the device's).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace kiln::cuda {

// What the runtime reports about a device.
struct DeviceFacts {
  std::string name;
  int major = 0, minor = 0;
  int multiprocessors = 0;
  int64_t shared_optin = 0;  // cudaDevAttrMaxSharedMemoryPerBlockOptin, bytes
  int64_t l2_bytes = 0;
};

struct DeviceTarget {
  std::string name;                   // the device's
  int major = 0, minor = 0;           // the compute capability kernels are chosen for
  int device_major = 0, device_minor = 0;  // the device's own
  int multiprocessors = 0;
  int64_t shared_optin = 0;           // dynamic shared memory one block may opt into, bytes
  int64_t l2_bytes = 0;
  bool sm90_features = false;         // wgmma, thread-block clusters, programmatic dependent launch
  std::string emulated;               // KILN_CUDA_TARGET's value ("sm86"); empty: the device itself

  // "sm_90a", "sm_86", or "sm_86 (emulated on sm_90)".
  std::string label() const;
};

// The shared memory a block may opt into on each architecture (the CUDA programming guide's
// table): 227 KB on sm_90, 163 KB on sm_80 and sm_87, 99 KB on sm_86, sm_89 and sm_120.
inline constexpr int64_t kSharedOptinSm80 = 163 * 1024;
inline constexpr int64_t kSharedOptinSm86 = 99 * 1024;

// The target for `device`. `emulate` is KILN_CUDA_TARGET's value (empty or unset: the device
// itself); `build_has_sm90a` whether this binary carries sm_90a code (the wgmma kernels exist only
// there). kInvalidArgument names the variable and the values it takes; an emulated target never
// exceeds the device (its shared memory is the smaller of the two).
Result<DeviceTarget> resolve_target(const DeviceFacts& device, std::string_view emulate, bool build_has_sm90a);

}  // namespace kiln::cuda
