#include "backend/cuda/context.h"

#include <algorithm>
#include <chrono>

#include "backend/cuda/blas.h"
#include "backend/cuda/kernels/device_code.h"

namespace kiln::cuda {

Status cuda_status(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return {};
  return internal_error(what + ": " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err));
}

size_t DevicePool::round_size(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t{2} << 20;
  bytes = std::max<size_t>(bytes, 1);
  if (bytes < (size_t{1} << 20)) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

bool PoolBudget::try_take(uint64_t bytes) {
  uint64_t held = held_.load(std::memory_order_relaxed);
  do {
    if (held + bytes > limit_.pool_bytes) return false;
  } while (!held_.compare_exchange_weak(held, held + bytes, std::memory_order_relaxed));
  return true;
}

Result<void*> DevicePool::allocate(size_t bytes, size_t* rounded) {
  const size_t want = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  // Best fit among cached blocks no more than 25% (plus one large granule) bigger than asked.
  auto it = free_.lower_bound(want);
  if (it != free_.end() && it->first <= want + want / 4 + (size_t{2} << 20) * (want >= (size_t{1} << 20))) {
    void* p = it->second;
    *rounded = it->first;
    free_.erase(it);
    ++stats_.hits;
    stats_.in_use_bytes += *rounded;
    stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
    return p;
  }
  if (budget_ && !budget_->try_take(want)) {
    if (frees_cache_ && !free_.empty()) free_cached_locked();  // the cache back to the driver, then once more
    if (!budget_->try_take(want)) {
      const uint64_t cached = stats_.reserved_bytes - stats_.in_use_bytes;
      return resource_exhausted(
          over_limit_message(budget_->limit(), want, budget_->held(), stats_.in_use_bytes, cached));
    }
  }
  cudaSetDevice(device_);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, want);
  if (err == cudaErrorMemoryAllocation && frees_cache_ && !free_.empty()) {
    (void)cudaGetLastError();
    free_cached_locked();  // give the cache back to the driver and try once more
    err = cudaMalloc(&p, want);
  }
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    if (budget_) budget_->give_back(want);
    return resource_exhausted("cuda: cannot allocate " + std::to_string(want) + " bytes of device memory (" +
                              std::to_string(stats_.in_use_bytes) + " in use): " + cudaGetErrorString(err));
  }
  *rounded = want;
  ++stats_.misses;
  stats_.reserved_bytes += want;
  stats_.in_use_bytes += want;
  stats_.peak_in_use_bytes = std::max(stats_.peak_in_use_bytes, stats_.in_use_bytes);
  return p;
}

void DevicePool::release(void* p, size_t rounded) {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.in_use_bytes -= rounded;
  free_.emplace(rounded, p);
}

void DevicePool::free_cached_locked() {
  for (auto& [size, p] : free_) {
    cudaFree(p);
    stats_.reserved_bytes -= size;
    if (budget_) budget_->give_back(size);
  }
  free_.clear();
}

PoolStats DevicePool::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void DevicePool::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  stats_.peak_in_use_bytes = stats_.in_use_bytes;
}

DevicePool::~DevicePool() {
  std::lock_guard<std::mutex> lock(mu_);
  free_cached_locked();
}

Result<std::shared_ptr<Context>> Context::create() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return failed_precondition(std::string("no CUDA device: ") + cudaGetErrorString(err));
  }
  if (count == 0) return failed_precondition("no CUDA device: the driver reports none");
  auto c = std::make_shared<Context>();
  c->device = 0;
  KILN_RETURN_IF_ERROR(cuda_status(cudaSetDevice(c->device), "cudaSetDevice(0)"));
  KILN_RETURN_IF_ERROR(cuda_status(cudaGetDeviceProperties(&c->props, c->device), "cudaGetDeviceProperties"));
  KILN_RETURN_IF_ERROR(check_device_code(c->props.name, c->props.major, c->props.minor));
  KILN_RETURN_IF_ERROR(device_target_status());
  KILN_ASSIGN_OR_RETURN(std::optional<DeviceMemoryLimit> limit, device_memory_limit_from_env());
  if (limit) c->budget = std::make_shared<PoolBudget>(*limit);
  KILN_RETURN_IF_ERROR(cuda_status(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate"));
  c->pool = std::make_shared<DevicePool>(c->device, c->budget);
  // Recorded graphs keep using the blocks this pool caches: they are never given back.
  c->recording_pool = std::make_shared<DevicePool>(c->device, c->budget, /*frees_cache=*/false);
  c->profiler = Profiler::from_env(c->stream);
  return c;
}

Context::~Context() {
  profiler.reset();  // prints its table while the stream still exists
  if (stream != nullptr) cudaStreamSynchronize(stream);
  if (blas_ != nullptr) cublasDestroy(blas_);
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (staging_ != nullptr) cudaFreeHost(staging_);
}

Result<cublasHandle_t> Context::blas() {
  std::lock_guard<std::mutex> lock(blas_mu_);
  if (blas_ != nullptr) return blas_;
  cublasHandle_t h = nullptr;
  KILN_RETURN_IF_ERROR(blas_status(cublasCreate(&h), "cublas create"));
  Status s = blas_status(cublasSetStream(h, stream), "cublas set stream");
  if (s.ok()) s = blas_status(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH), "cublas set math mode");
  if (!s.ok()) {
    cublasDestroy(h);
    return s;
  }
  blas_ = h;
  return blas_;
}

Status Context::check_owner(const char* what) const {
  const std::thread::id r = recorder.load(std::memory_order_acquire);
  if (r == std::thread::id() || r == std::this_thread::get_id()) return {};
  return failed_precondition(std::string("cuda: ") + what +
                             " from a thread other than the one recording a graph on the stream (the device's work "
                             "belongs to one thread; run it through the engine's)");
}

Status Context::synchronize(const std::string& what) {
  KILN_RETURN_IF_ERROR(check_owner(what.c_str()));
  const auto t0 = std::chrono::steady_clock::now();
  const cudaError_t err = cudaStreamSynchronize(stream);
  host_wait_ns.fetch_add(static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                                   std::chrono::steady_clock::now() - t0).count()),
                         std::memory_order_relaxed);
  synchronizations.fetch_add(1, std::memory_order_relaxed);
  return cuda_status(err, what);
}

Result<void*> Context::staging(size_t bytes) {
  if (bytes <= staging_bytes_) return staging_;
  if (staging_ != nullptr) {
    KILN_RETURN_IF_ERROR(synchronize("staging: synchronize"));
    cudaFreeHost(staging_);
    staging_ = nullptr;
    staging_bytes_ = 0;
  }
  const size_t want = std::max<size_t>(bytes, size_t{1} << 20);
  KILN_RETURN_IF_ERROR(cuda_status(cudaMallocHost(&staging_, want), "staging: cudaMallocHost"));
  staging_bytes_ = want;
  return staging_;
}

Result<Tensor> Context::empty(Shape shape, DType dtype) {
  KILN_RETURN_IF_ERROR(check_owner("allocate"));
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  size_t rounded = 0;
  const std::shared_ptr<DevicePool>& from = recording() ? recording_pool : pool;
  KILN_ASSIGN_OR_RETURN(void* p, from->allocate(bytes, &rounded));
  auto storage = std::make_shared<DeviceBuffer>(from, p, bytes, rounded, device);
  return Tensor(std::move(storage), dtype, shape);
}

}  // namespace kiln::cuda
