#include "backend/cuda/kernels/device_code.h"

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <string>
#include <unordered_map>

#include "backend/cuda/kernels/launch.h"

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

namespace {

struct LoadedTarget {
  DeviceTarget target;
  Status status;
};

const LoadedTarget& loaded_target() {
  static const LoadedTarget loaded = [] {
    LoadedTarget l;
    DeviceFacts d;
    cudaDeviceProp p{};
    int optin = 0;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0) != cudaSuccess) {
      (void)cudaGetLastError();  // not a launch's error
      l.status = failed_precondition("CUDA device 0: its properties could not be read");
      return l;
    }
    d.name = p.name;
    d.major = p.major;
    d.minor = p.minor;
    d.multiprocessors = p.multiProcessorCount;
    d.shared_optin = optin;
    d.l2_bytes = p.l2CacheSize;
    const char* env = std::getenv("KILN_CUDA_TARGET");
    Result<DeviceTarget> t = resolve_target(d, env == nullptr ? "" : env, KILN_CUDA_HAS_SM90A != 0);
    if (t.ok()) {
      l.target = std::move(t).value();
    } else {
      l.status = t.status();
      l.target = resolve_target(d, "", KILN_CUDA_HAS_SM90A != 0).value();
    }
    return l;
  }();
  return loaded;
}

}  // namespace

const DeviceTarget& device_target() { return loaded_target().target; }

Status device_target_status() { return loaded_target().status; }

Status allow_shared_memory(const void* kernel, int64_t bytes, const char* name) {
  std::atomic<int64_t>& most = launch_census().max_shared_bytes;
  for (int64_t seen = most.load(std::memory_order_relaxed);
       bytes > seen && !most.compare_exchange_weak(seen, bytes, std::memory_order_relaxed);) {
  }
  const DeviceTarget& t = device_target();
  if (bytes > t.shared_optin)
    return failed_precondition(std::string(name) + " needs " + std::to_string(bytes) +
                               " bytes of shared memory a block; " + t.label() + " allows " +
                               std::to_string(t.shared_optin));
  if (bytes <= 48 * 1024) return {};
  static std::mutex mu;
  static std::unordered_map<const void*, int64_t> given;
  std::lock_guard<std::mutex> lock(mu);
  int64_t& g = given[kernel];
  if (g >= bytes) return {};
  const cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err != cudaSuccess) {
    (void)cudaGetLastError();  // not a launch's error
    return internal_error(std::string(name) + ": raising the shared-memory limit to " + std::to_string(bytes) +
                          " bytes: " + cudaGetErrorString(err));
  }
  g = bytes;
  return {};
}

}  // namespace kiln::cuda
