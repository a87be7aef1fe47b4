// Whether this binary holds code the current device can run. A build carries machine code for the
// architectures it was compiled for (CMAKE_CUDA_ARCHITECTURES) and PTX the driver may compile for
// newer ones; on any other device every kernel fails at its first launch, so the backend asks here
// when it starts and refuses such a device with the reason (`--backend auto` then takes the CPU).
#pragma once

#include "core/status.h"

namespace kiln::cuda {

// The architectures this build compiled kernels for, as CMake names them ("90a").
const char* compiled_architectures();

// OK when the current device has compute capability 8.0 or more and this build has code for it;
// else kFailedPrecondition naming the device, its compute capability and the compiled list.
Status check_device_code(const char* device_name, int major, int minor);

// Whether device 0, the one the backend runs on, has sm_90's features (wgmma, thread-block
// clusters); asked once. Kernels that use them are compiled out below sm_90, and their launchers
// take their portable forms there.
bool device_is_hopper_or_newer();

}  // namespace kiln::cuda
