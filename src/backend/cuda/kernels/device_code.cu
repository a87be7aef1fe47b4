#include "backend/cuda/kernels/device_code.h"

#include <cuda_runtime.h>

#include <string>

namespace kiln::cuda {

namespace {

// The smallest kernel: whether the runtime finds an image of it for the device is whether it finds
// one of every kernel, since all are compiled for the same list.
__global__ void probe_kernel() {}

}  // namespace

const char* compiled_architectures() { return KILN_CUDA_ARCHITECTURES; }

Status check_device_code(const char* device_name, int major, int minor) {
  const std::string device = std::string(device_name) + " (compute capability " + std::to_string(major) + "." +
                             std::to_string(minor) + ")";
  if (major < 8)
    return failed_precondition("CUDA device " + device + " is older than compute capability 8.0, the oldest Kiln runs on");
  cudaFuncAttributes attributes{};
  const cudaError_t err = cudaFuncGetAttributes(&attributes, probe_kernel);
  if (err == cudaSuccess) return {};
  (void)cudaGetLastError();  // not a launch's error
  return failed_precondition("CUDA device " + device + ": this build has no kernels it can run (" +
                             cudaGetErrorString(err) + "); it was compiled for CUDA architectures " +
                             compiled_architectures() + " (CMAKE_CUDA_ARCHITECTURES)");
}

bool device_is_hopper_or_newer() {
  static const bool hopper = [] {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not a launch's error
      return false;
    }
    return major >= 9;
  }();
  return hopper;
}

}  // namespace kiln::cuda
