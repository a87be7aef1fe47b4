// The device state every CUDA facet shares: the device, one stream (all work is ordered on it),
// the cuBLASLt handle and a caching allocator for device memory.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "backend/cuda/profile.h"
#include "backend/device_memory_limit.h"
#include "core/status.h"
#include "core/tensor.h"

namespace kiln::cuda {

// "what: <cuda error name>: <message>" as a Status, or OK.
Status cuda_status(cudaError_t err, const std::string& what);

struct PoolStats {
  uint64_t hits = 0, misses = 0;         // allocations served from the cache / by cudaMalloc
  uint64_t reserved_bytes = 0;           // held from the driver (in use + cached)
  uint64_t in_use_bytes = 0, peak_in_use_bytes = 0;
};

// The bytes a context's pools hold from the driver together, against KILN_CUDA_MEMORY_LIMIT_GB's
// share for them (DeviceMemoryLimit::pool_bytes). Shared by the pools of one context.
class PoolBudget {
 public:
  explicit PoolBudget(DeviceMemoryLimit limit) : limit_(limit) {}
  const DeviceMemoryLimit& limit() const { return limit_; }
  bool try_take(uint64_t bytes);  // false, taking nothing, when the pools would pass pool_bytes
  void give_back(uint64_t bytes) { held_.fetch_sub(bytes, std::memory_order_relaxed); }
  uint64_t held() const { return held_.load(std::memory_order_relaxed); }

 private:
  const DeviceMemoryLimit limit_;
  std::atomic<uint64_t> held_{0};
};

// A caching allocator: freed blocks are kept, keyed by size, and handed out again. Reuse is safe
// without events because every kernel and copy runs on the one stream of the Context, in order.
// Shared by the Context and every device buffer, so buffers may outlive the backend.
// With a budget, a block the cache cannot serve is taken from the budget first; over it, the
// pool gives its cache back to the driver (when `frees_cache`) and asks once more, then refuses
// with the numbers. A pool whose cached blocks recorded graphs still use (the recording pool)
// never frees them.
class DevicePool {
 public:
  explicit DevicePool(int device, std::shared_ptr<PoolBudget> budget = nullptr, bool frees_cache = true)
      : device_(device), budget_(std::move(budget)), frees_cache_(frees_cache) {}
  ~DevicePool();
  Result<void*> allocate(size_t bytes, size_t* rounded);
  void release(void* p, size_t rounded);
  PoolStats stats() const;
  void reset_peak();  // peak_in_use_bytes = in_use_bytes: the next peak is of the work after this
  static size_t round_size(size_t bytes);

 private:
  void free_cached_locked();
  int device_;
  std::shared_ptr<PoolBudget> budget_;  // null: no limit
  bool frees_cache_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> free_;  // rounded size -> block
  PoolStats stats_;
};

// Device memory owned by the pool; returned to it when the last tensor viewing it goes away.
class DeviceBuffer final : public Storage {
 public:
  DeviceBuffer(std::shared_ptr<DevicePool> pool, void* p, size_t bytes, size_t rounded, int device)
      : Storage(p, bytes, Device{DeviceKind::kCuda, device}), pool_(std::move(pool)), rounded_(rounded) {}
  ~DeviceBuffer() override { pool_->release(data_, rounded_); }

 private:
  std::shared_ptr<DevicePool> pool_;
  size_t rounded_;
};

struct Context {
  int device = 0;
  cudaDeviceProp props{};
  cudaStream_t stream = nullptr;
  // KILN_CUDA_MEMORY_LIMIT_GB, read once at create(); null: the pools take what the driver gives.
  std::shared_ptr<PoolBudget> budget;
  std::shared_ptr<DevicePool> pool;
  // While a recording is made (replay.cc), allocations come from recording_pool instead: its
  // blocks are only ever handed to recorded work, which replays in stream order like everything
  // else, so a recording's temporaries never alias memory that eager work keeps.
  std::shared_ptr<DevicePool> recording_pool;
  // The thread making a recording (replay.cc); none (a default id) otherwise. Work another thread
  // put on the stream meanwhile would be captured into the graph or invalidate it, so the device
  // is one thread's (a server's engine thread: adapter loads go there between cycles), and
  // allocation, the storage facet's copies and synchronize refuse any other thread while a
  // recording is made (the work that reaches the device from off that thread is of that kind).
  std::atomic<std::thread::id> recorder{};
  bool recording() const { return recorder.load(std::memory_order_acquire) != std::thread::id(); }
  // kFailedPrecondition naming `what` when another thread is making a recording; OK otherwise.
  // A check, not a lock: a caller that passes it and a recording that starts just after are
  // kept apart only by the rule above.
  Status check_owner(const char* what) const;
  std::unique_ptr<Profiler> profiler;  // KILN_CUDA_PROFILE=1 only

  static Result<std::shared_ptr<Context>> create();
  ~Context();
  // A page-locked host buffer of at least `bytes` for staging host transfers (pageable copies
  // run at a fraction of the bus rate). Hold staging_mu while using it.
  Result<void*> staging(size_t bytes);
  std::mutex staging_mu;
  // An uninitialised contiguous f32/bf16/... device tensor from the pool, or from the recording
  // pool while recording (allocate() zero-fills).
  Result<Tensor> empty(Shape shape, DType dtype);
  // The cuBLAS handle of the backend's cuBLAS (not cuBLASLt) GEMMs, training's: bound to the
  // stream, default math (no TF32); created on first use.
  Result<cublasHandle_t> blas();
  // Waits for everything queued on the stream; "what: <error>" on failure. Every host wait of the
  // backend goes through here, so the time the host spends blocked on the device is counted:
  // a step whose wall time is mostly host wait is device-bound, one with little is host-bound.
  Status synchronize(const std::string& what);
  std::atomic<uint64_t> host_wait_ns{0}, synchronizations{0};
  // Bytes copied from the device to the host (the storage facet's copies and the sampling
  // results): a decode step that samples on the device moves ids, not logits rows.
  std::atomic<uint64_t> bytes_to_host{0};
  // The form the last GDN backward ran in (gdn_backward_kernel_name), null before the first.
  std::atomic<const char*> last_gdn_backward{nullptr};

 private:
  void* staging_ = nullptr;
  size_t staging_bytes_ = 0;
  cublasHandle_t blas_ = nullptr;
  std::mutex blas_mu_;
};

}  // namespace kiln::cuda
