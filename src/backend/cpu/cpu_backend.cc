#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <cstring>
#include <fstream>

#include <unistd.h>

#include "backend/cpu/cpu_facets.h"
#include "core/thread_pool.h"

namespace kiln {

namespace {

std::string cpu_model_name() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  return "unknown cpu";
}

BackendCapabilities cpu_capabilities() {
  BackendCapabilities c;
  c.storage.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.storage.activation_dtype = DType::kF32;
  c.storage.zero_copy_host_weights = true;
  c.matmul.engine = "openblas sgemm (weights converted per tile) + avx2 gemv for m <= 8";
  c.matmul.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.attention.prefill = c.attention.paged_decode = true;
  c.attention.block_size = 64;
  c.attention.max_head_dim = 0;  // any
  c.attention.kv_dtypes = {DType::kF32};
  c.gdn.chunked_prefill = c.gdn.recurrent_decode = true;
  c.gdn.state_dtype = DType::kF32;
  // Half the CUDA policy: host RAM holds the activations here, and 512-row passes are still large
  // GEMMs. Tiles are multiples of the 64-token block (model/tiled_prefill.h).
  c.streaming_prefill = {true, 1024, 512};
  c.decode.batched = true;
  c.decode_execution.mode = "eager";
  c.training.supported = true;  // the f32 reference: LoRA factors, gradients and optimizer state in f32
  c.training.lora_dtypes = {DType::kF32};
  c.training.optimizers = {"muon", "adam_w", "sgd"};
  // Muon's Newton-Schulz runs in the rank-sized Gram space (r x r); 256 keeps it a small matrix.
  c.training.muon_rank_min = 1;
  c.training.muon_rank_max = 256;
  c.replay.captured = "none: the CPU runs every step eagerly";
  c.fallback = {FallbackMode::kReference, FallbackMode::kCorrectnessAllowed, FallbackMode::kReference};
  return c;
}

class CpuBackend final : public Backend {
 public:
  CpuBackend() : caps_(cpu_capabilities()) {
    // All parallelism comes from the process pool; BLAS calls run inside its tasks.
    openblas_set_num_threads(1);
    id_.name = "cpu";
    id_.device_name = cpu_model_name();
    id_.threads = default_thread_pool().size();
  }
  const BackendIdentity& identity() const override { return id_; }
  const BackendCapabilities& capabilities() const override { return caps_; }
  StorageFacet& storage() override { return storage_; }
  LinearFacet& linear() override { return linear_; }
  NormFacet& norm() override { return norm_; }
  AttentionFacet& attention() override { return attention_; }
  ConvFacet& conv() override { return conv_; }
  GdnFacet& gdn() override { return gdn_; }
  ElementwiseFacet& elementwise() override { return elementwise_; }
  SamplingFacet& sampling() override { return sampling_; }
  TrainingFacet& training() override { return training_; }
  OptimizerFacet& optimizer() override { return optimizer_; }
  // The CPU computes in host memory: this process's resident set out of the physical RAM.
  MemoryUsage memory_usage() const override {
    MemoryUsage m;
    m.what = "host memory: this process's resident set of the physical RAM";
    const long page = sysconf(_SC_PAGESIZE), pages = sysconf(_SC_PHYS_PAGES);
    if (page > 0 && pages > 0) m.total_bytes = static_cast<int64_t>(page) * pages;
    std::ifstream statm("/proc/self/statm");
    int64_t size = 0, resident = 0;
    if (page > 0 && statm >> size >> resident) m.used_bytes = resident * page;
    return m;
  }

 private:
  BackendIdentity id_;
  const BackendCapabilities caps_;
  cpu::Storage storage_;
  cpu::Linear linear_;
  cpu::Norm norm_;
  cpu::Attention attention_;
  cpu::Conv conv_;
  cpu::Gdn gdn_;
  cpu::Elementwise elementwise_;
  cpu::Sampling sampling_;
  cpu::Training training_;
  cpu::Optimizer optimizer_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

namespace cpu {

Result<Tensor> Storage::allocate(Shape shape, DType dtype) { return Tensor::empty(shape, dtype); }

Result<Tensor> Storage::upload(const Tensor& host) {
  if (host.device().kind != DeviceKind::kHost) return invalid_argument("upload: source is not a host tensor");
  return host;  // the CPU computes on host memory in place: mmapped weights are never copied
}

namespace {
Status copy_host(const Tensor& src, const Tensor& dst, const char* what) {
  if (!src.is_contiguous() || !dst.is_contiguous())
    return invalid_argument(std::string(what) + ": both tensors must be contiguous");
  if (src.nbytes() != dst.nbytes() || src.dtype() != dst.dtype())
    return invalid_argument(std::string(what) + ": " + src.describe() + " does not match " + dst.describe());
  std::memcpy(dst.raw(), src.raw(), src.nbytes());
  return {};
}
}  // namespace

Status Storage::copy_from_host(const Tensor& s, const Tensor& d) { return copy_host(s, d, "copy_from_host"); }
Status Storage::copy_to_host(const Tensor& s, const Tensor& d) { return copy_host(s, d, "copy_to_host"); }
Status Storage::copy(const Tensor& s, const Tensor& d) { return copy_host(s, d, "copy"); }
Status Storage::synchronize() { return {}; }  // every CPU op has finished when it returns

Status Storage::zero(const Tensor& d) {
  if (!d.is_contiguous()) return invalid_argument("zero: " + d.describe() + " is not contiguous");
  std::memset(d.raw(), 0, d.nbytes());
  return {};
}

}  // namespace cpu
}  // namespace kiln
