// The CUDA backend: f32 activations on the device, weights in their checkpoint dtype, a GEMV
// kernel for decode-sized GEMMs and cuBLASLt for the rest, one kernel per operation (kernels/).
// See docs/cuda.md for what is measured and what is future work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"

namespace kiln {

// The backend on device 0, or an error ("no CUDA device: ...") where there is none.
Result<std::unique_ptr<Backend>> make_cuda_backend();

// Counters a CUDA backend keeps, for tests and `kiln bench`.
struct CudaBackendStats {
  uint64_t matmul_cache_hits = 0, matmul_cache_misses = 0, matmul_cache_entries = 0;
  uint64_t matmul_plans_timed = 0;  // cuBLASLt plans whose algorithm was chosen by timing
  uint64_t pool_hits = 0, pool_misses = 0;  // device allocations served from the cache / by cudaMalloc
  uint64_t pool_reserved_bytes = 0, pool_peak_in_use_bytes = 0;
  uint64_t pool_in_use_bytes = 0;  // now; with cuda_reset_peak_memory, the baseline of the next peak
  uint64_t device_used_bytes = 0, device_total_bytes = 0;  // cudaMemGetInfo: every process and the context
  uint64_t recording_pool_reserved_bytes = 0;  // the graph recordings' pool (Context::recording_pool)
  // What the pools may hold together under KILN_CUDA_MEMORY_LIMIT_GB (DeviceMemoryLimit::pool_bytes); 0: no limit.
  uint64_t pool_limit_bytes = 0;
  // Kernel launches plus cuBLASLt matmuls, by every CUDA backend of this process since it started
  // (kernels/launch.h); take differences around the work to count.
  uint64_t launches = 0;
  uint64_t cublaslt_matmuls = 0;  // of this backend (each is one of `launches`)
  // CUDA graphs of this backend: made, and launched (a replay's kernels are not in `launches`).
  uint64_t graph_recordings = 0, graph_replays = 0;
  // Host waits on the device (Context::synchronize): how many, and the time spent blocked in them.
  uint64_t synchronizations = 0;
  double host_wait_seconds = 0;
  // Bytes copied from the device to the host (storage copies, sampling results).
  uint64_t bytes_to_host = 0;
  // The form the last GDN backward ran in: chunked, or registers where the chunked form does not
  // fit the target (empty before the first).
  std::string gdn_backward;
};
// Fails when `backend` is not a CUDA backend.
Result<CudaBackendStats> cuda_backend_stats(Backend& backend);

// Restarts pool_peak_in_use_bytes from what is in use now, so that the next peak is one piece of
// work's (`kiln bench`: the activations of a prefill). Fails when `backend` is not a CUDA backend.
Status cuda_reset_peak_memory(Backend& backend);

// Device-to-device copy bandwidth of `backend`'s device in bytes per second, counting bytes read
// plus bytes written (the decode roofline's denominator), over two buffers of `bytes` each.
Result<double> cuda_device_copy_bandwidth(Backend& backend, size_t bytes);

}  // namespace kiln
