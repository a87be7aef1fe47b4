// Programmatic dependent launch (Hopper): a kernel launched through launch_pdl may be scheduled
// while its predecessor on the stream is still finishing, so its blocks' launch and ramp overlap
// the predecessor's tail (a decode step is ~300 kernels of a few microseconds each, where that
// fixed cost is a large share). The contract that keeps stream order intact: every kernel launched
// this way calls pdl_begin() before it reads or writes any memory another kernel may touch; only
// reads of memory no kernel writes (weights), or that no kernel wrote since the one two back,
// may come before it (this kernel starts only when its predecessor has passed its own
// pdl_begin, which waited for the kernel before). pdl_begin() waits until the
// predecessor has completed and its writes are visible, then lets this kernel's own dependent
// start launching. Kernels launched the plain way, cuBLAS and copies keep full serialisation on
// both sides. On by default (tuning().pdl; KILN_CUDA_PDL=0 turns it off): on the H200 the gpu tests
// and graph replay pass with it, and it takes ~0.13 ms off a 3.4 ms batch-1 step (docs/decisions.md).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/tuning.h"

namespace kiln::cuda {

// A launch whose errors launch_status() then reports (the runtime records them as the last error).
// cluster_x > 1: the blocks run in thread-block clusters of that many along x (gridDim.x a
// multiple of it), which share their shared memory (cooperative_groups::this_cluster()).
template <typename... Params, typename... Args>
inline void launch_pdl_cluster(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                               unsigned cluster_x, Args&&... args) {
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared;
  config.stream = stream;
  cudaLaunchAttribute attribute[2];
  unsigned n = 0;
  const bool pdl = tuning().pdl && device_target().sm90_features;  // programmatic dependent launch is sm_90's
  if (cluster_x > 1 || pdl) launch_census().sm90_launches.fetch_add(1, std::memory_order_relaxed);
  if (cluster_x > 1) {
    attribute[n].id = cudaLaunchAttributeClusterDimension;
    attribute[n].val.clusterDim.x = cluster_x;
    attribute[n].val.clusterDim.y = 1;
    attribute[n].val.clusterDim.z = 1;
    ++n;
  }
  if (pdl) {
    attribute[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attribute[n].val.programmaticStreamSerializationAllowed = 1;
    ++n;
  }
  config.attrs = attribute;
  config.numAttrs = n;
  (void)cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... Params, typename... Args>
inline void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared, cudaStream_t stream,
                       Args&&... args) {
  launch_pdl_cluster(kernel, grid, block, shared, stream, 1u, std::forward<Args>(args)...);
}

#ifdef __CUDACC__
// Waits for the predecessor grid (a no-op when launched without the attribute), then allows the
// dependent grid to launch: its blocks take free slots and wait in their own pdl_begin.
__device__ __forceinline__ void pdl_begin() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// An L2 prefetch of read-only memory, for the work before pdl_begin.
__device__ __forceinline__ void prefetch_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
}
#endif

}  // namespace kiln::cuda
