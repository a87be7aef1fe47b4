// What every kernel launcher shares: the Status of a launch, naming the kernel and its shape.
// With KILN_CUDA_SYNC=1 in the environment each launch is also synchronised, so an asynchronous
// fault is reported by the launch that caused it.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>
#include <utility>

#include "core/status.h"

namespace kiln::cuda {

inline bool sync_every_launch() {
  static const bool on = [] {
    const char* v = std::getenv("KILN_CUDA_SYNC");
    return v != nullptr && v[0] == '1';
  }();
  return on;
}

// Kernel launches made by this process: every launcher reports each launch through
// launch_status exactly once, so counting there counts them all (cuda_backend_stats; decode
// launches per token in `kiln bench`). Process-wide because launchers see a stream, not a Context.
inline std::atomic<uint64_t>& kernel_launch_count() {
  static std::atomic<uint64_t> n{0};
  return n;
}

// What this process's launches asked of the device: how many used an sm_90 feature (a wgmma
// kernel, a thread-block cluster, programmatic dependent launch) and the most dynamic shared memory
// a kernel asked for (allow_shared_memory). Under KILN_CUDA_TARGET=sm86 a test holds both to what
// such a device has.
struct LaunchCensus {
  std::atomic<uint64_t> sm90_launches{0};
  std::atomic<int64_t> max_shared_bytes{0};
};
inline LaunchCensus& launch_census() {
  static LaunchCensus c;
  return c;
}

// Why the launch about to be checked was not made, for launchers without a Status of their own
// (a shared-memory request the target refused): launch_status reports it as that launch's error.
inline Status& refused_launch() {
  thread_local Status s;
  return s;
}

// The Status of the launch just made (and one more launch counted). `shape` (a string, or a callable returning one) describes
// the launch in an error; a callable is only evaluated on failure, keeping the hot path free of
// string building.
template <typename Shape>
inline Status launch_status(const char* kernel, const Shape& shape, cudaStream_t stream) {
  kernel_launch_count().fetch_add(1, std::memory_order_relaxed);
  if (Status& refused = refused_launch(); !refused.ok()) [[unlikely]]
    return std::exchange(refused, Status());
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess && sync_every_launch()) err = cudaStreamSynchronize(stream);
  if (err == cudaSuccess) return {};
  std::string text;
  if constexpr (std::is_invocable_v<const Shape&>) text = shape();
  else text = shape;
  return internal_error(std::string(kernel) + " (" + text + "): " + cudaGetErrorName(err) + ": " +
                        cudaGetErrorString(err));
}

// Whether every row of a view starting at p, rows row_stride_bytes apart, starts `align`-byte
// aligned: the condition of a kernel's vectorised form (four floats a thread).
inline bool rows_aligned(const void* p, int64_t row_stride_bytes, int64_t align) {
  return reinterpret_cast<uintptr_t>(p) % align == 0 && row_stride_bytes % align == 0;
}

inline unsigned grid_blocks(int64_t n, int64_t per_block, int64_t cap = 65535) {
  int64_t b = (n + per_block - 1) / per_block;
  return static_cast<unsigned>(b < 1 ? 1 : (b > cap ? cap : b));
}

}  // namespace kiln::cuda
