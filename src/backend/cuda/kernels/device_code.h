// Whether this binary holds code the current device can run. A build carries machine code for the
// architectures it was compiled for (CMAKE_CUDA_ARCHITECTURES) and PTX the driver may compile for
// newer ones; on any other device every kernel fails at its first launch, so the backend asks here
// when it starts and refuses such a device with the reason (`--backend auto` then takes the CPU).
#pragma once

#include "backend/cuda/device_target.h"
#include "core/status.h"

namespace kiln::cuda {

// The architectures this build compiled kernels for, as CMake names them ("90a").
const char* compiled_architectures();

// OK when the current device has compute capability 8.0 or more and this build has code for it;
// else kFailedPrecondition naming the device, its compute capability and the compiled list.
Status check_device_code(const char* device_name, int major, int minor);

// The target of device 0, the one the backend runs on (device_target.h), read once with
// KILN_CUDA_TARGET applied. Launchers read it to pick kernel forms; kernels that use sm_90 features
// are compiled out elsewhere, and their launchers take their portable forms there.
const DeviceTarget& device_target();
// OK, or why KILN_CUDA_TARGET could not be applied (device_target() is then the device itself);
// Context::create refuses to start on it.
Status device_target_status();

// Opts `kernel` into `bytes` of dynamic shared memory a block (what a launch past the default
// 48 KB needs) and records the request in launch_census(). kFailedPrecondition naming `name`
// when the target allows less (device_target().shared_optin): dispatch picks forms that fit, so
// this is the guard that a form chosen for a larger device is never launched on a smaller one.
// A kernel's attribute is raised only past what it was given before.
Status allow_shared_memory(const void* kernel, int64_t bytes, const char* name);

}  // namespace kiln::cuda
