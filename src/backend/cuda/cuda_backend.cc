#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_facets.h"
#include "backend/cuda/kernel_families.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/paged_attention.h"
#include "backend/cuda/training.h"
#include "backend/cuda/tuning.h"

namespace kiln {

namespace {

BackendCapabilities cuda_capabilities(const cudaDeviceProp& p, const cuda::PoolBudget* budget) {
  BackendCapabilities c;
  const cuda::DeviceTarget& target = cuda::device_target();
  c.storage.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.storage.activation_dtype = DType::kF32;
  c.storage.zero_copy_host_weights = false;  // weights are uploaded once to device memory
  // Under KILN_CUDA_MEMORY_LIMIT_GB, the card the limit describes.
  c.storage.device_memory_bytes =
      budget ? std::min<uint64_t>(p.totalGlobalMem, budget->limit().limit_bytes) : p.totalGlobalMem;
  c.compute.capability = std::to_string(target.major) + "." + std::to_string(target.minor);
  c.compute.multiprocessors = target.multiprocessors;
  c.compute.target = target.label();
  c.compute.shared_memory_per_block = target.shared_optin;
  c.kernels = cuda::kernel_families();
  // Machine code for the device's architecture is in the binary, unless the driver is told to
  // compile every kernel from the embedded PTX.
  const char* jit = std::getenv("CUDA_FORCE_PTX_JIT");
  const std::string list = std::string(" ") + cuda::compiled_architectures() + " ";
  bool sass = false;  // CMake's forms: "86", "86-real" (machine code), "90a", "90a-real"; "80-virtual" is PTX
  for (const std::string& a : {std::to_string(p.major) + std::to_string(p.minor),
                              std::to_string(p.major) + std::to_string(p.minor) + "a"})
    sass = sass || list.find(" " + a + " ") != std::string::npos || list.find(" " + a + "-real ") != std::string::npos;
  c.startup.precompiles_kernels = sass && (jit == nullptr || jit[0] != '1');
  c.matmul.engine = std::string("gemv kernel for m <= 8 on bf16/f16 weights (f32 x, f32 accumulate) and a tensor-core "
                                 "skinny GEMM for m <= 16 on bf16 (") +
                     (target.sm90_features ? "wgmma" : "mma.sync") +
                     "), each where it timed faster than cublaslt on this device for the shape; cublaslt otherwise "
                     "(bf16/f16 weights: x rounded to the weight dtype, f32 accumulate; f32: no tf32)";
  c.matmul.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.matmul.algorithm_cache = true;
  c.attention.prefill = c.attention.paged_decode = true;
  c.attention.block_size = 64;
  c.attention.max_head_dim = cuda::kAttentionMaxHeadDim;
  // bf16 first: a bf16 checkpoint's K/V is kept in bf16 (Qwen35Model::kv_dtype), half the bytes
  // a decode step reads; f32 for f32 checkpoints; e4m3 when asked (memory.kv_cache_fp8).
  c.attention.kv_dtypes = {DType::kF32, DType::kF8E4M3};
  if (cuda::tuning().kv_bf16) c.attention.kv_dtypes.insert(c.attention.kv_dtypes.begin(), DType::kBF16);
  c.gdn.chunked_prefill = true;  // chunks of 64 (dk 16..256; others run the recurrent kernel)
  c.gdn.recurrent_decode = true;
  c.gdn.fused_decode = true;     // conv, delta rule and gated norm fused: a vectors kernel and a state kernel a step
  c.gdn.state_dtype = DType::kF32;
  // Prompts of 8192 tokens and up prefill in passes of 4096 tokens a row: a 32k prompt's
  // activations shrink 8-fold while the prompts measured so far (4096 and below) keep their
  // single pass. The original tiled from 2048 in passes of 1024; those smaller values wait for
  // an H200 measurement of what passes of M = 1024 cost (docs/decisions.md).
  c.streaming_prefill = {true, 8192, 4096};
  c.decode.batched = true;
  c.decode.max_batch = 65535;  // grid limit of the per-row kernels
  // The engine replays the decode step, rows with adapters included (model/decode_replay.h).
  c.decode_execution.mode = cuda::tuning().graphs ? "graph_replay" : "eager";
  c.training.supported = true;  // every backward op and optimizer step on the device, f32 LoRA factors and state
  c.training.lora_dtypes = {DType::kF32};
  c.training.optimizers = {"muon", "adam_w", "sgd"};
  // Muon's Newton-Schulz runs in the rank-sized Gram space (r x r) on the device (kMuonMaxRank).
  c.training.muon_rank_min = 1;
  c.training.muon_rank_max = 256;
  c.replay.graphs = cuda::tuning().graphs;
  c.replay.captured = cuda::tuning().graphs
                          ? "the engine's decode step for rows without adapters, one graph per (rows padded to 1, 2, 4, 8 "
                            "or a multiple of 8; block-table width padded to a power of two); prefill, rows with "
                            "adapters and training run eagerly"
                          : "none: KILN_CUDA_GRAPHS=0 runs every step eagerly";
  c.fallback = {FallbackMode::kStrict, FallbackMode::kNativeRequired, FallbackMode::kNativeRequired};
  return c;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(std::shared_ptr<cuda::Context> ctx)
      : ctx_(ctx), caps_(cuda_capabilities(ctx->props, ctx->budget.get())), storage_(ctx), linear_(ctx), norm_(ctx), attention_(ctx),
        conv_(ctx), gdn_(ctx), elementwise_(ctx), sampling_(ctx), training_(ctx), optimizer_(ctx), replay_(ctx) {
    const cudaDeviceProp& p = ctx->props;
    id_.name = "cuda";
    const cuda::DeviceTarget& t = cuda::device_target();
    id_.device_name = std::string(p.name) + " (sm_" + std::to_string(p.major) + std::to_string(p.minor) + ", " +
                      std::to_string(p.multiProcessorCount) + " SMs, " +
                      std::to_string(p.totalGlobalMem >> 20) + " MiB" +
                      (t.emulated.empty() ? std::string() : ", emulating " + t.emulated) +
                      (ctx->budget ? std::string(", limited to ") + format_gib(ctx->budget->limit().limit_bytes) : "") +
                      ")";
    // The driver's CUDA version ("CUDA 13.0"): what evidence and receipts record of the driver.
    if (int v = 0; cudaDriverGetVersion(&v) == cudaSuccess && v > 0)
      id_.driver = "CUDA " + std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
    id_.device = Device{DeviceKind::kCuda, ctx->device};
    id_.threads = 1;
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
  ReplayFacet& replay() override { return replay_; }
  MemoryUsage memory_usage() const override {
    MemoryUsage m;
    if (ctx_->budget) {
      // Against the limit: the allowance for the context, the blocks in use, and the recording
      // pool's cache (recorded graphs use it); the main pool's cache is free to reuse.
      const DeviceMemoryLimit& l = ctx_->budget->limit();
      const cuda::PoolStats main = ctx_->pool->stats(), rec = ctx_->recording_pool->stats();
      m.what = std::string("device memory under ") + kCudaMemoryLimitEnv +
               ": the pools' blocks in use plus what is set aside for the CUDA context";
      m.used_bytes = static_cast<int64_t>(kCudaOutsidePoolBytes + main.in_use_bytes + rec.reserved_bytes);
      m.total_bytes = static_cast<int64_t>(l.limit_bytes);
      return m;
    }
    m.what = "device memory in use by every process and context (cudaMemGetInfo)";
    size_t free_b = 0, total_b = 0;
    if (cudaSetDevice(ctx_->device) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) {
      m.used_bytes = static_cast<int64_t>(total_b - free_b);
      m.total_bytes = static_cast<int64_t>(total_b);
    }
    return m;
  }

  cuda::Context& context() { return *ctx_; }
  const cuda::Linear& linear_impl() const { return linear_; }
  const cuda::Replay& replay_impl() const { return replay_; }

 private:
  std::shared_ptr<cuda::Context> ctx_;
  BackendIdentity id_;
  const BackendCapabilities caps_;
  cuda::Storage storage_;
  cuda::Linear linear_;
  cuda::Norm norm_;
  cuda::Attention attention_;
  cuda::Conv conv_;
  cuda::Gdn gdn_;
  cuda::Elementwise elementwise_;
  cuda::Sampling sampling_;
  cuda::Training training_;
  cuda::Optimizer optimizer_;
  cuda::Replay replay_;
};

Result<CudaBackend*> as_cuda(Backend& b) {
  auto* c = dynamic_cast<CudaBackend*>(&b);
  if (c == nullptr) return invalid_argument("backend '" + b.identity().name + "' is not the cuda backend");
  return c;
}

}  // namespace

Result<std::unique_ptr<Backend>> make_cuda_backend() {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<cuda::Context> ctx, cuda::Context::create());
  return std::unique_ptr<Backend>(std::make_unique<CudaBackend>(std::move(ctx)));
}

Result<CudaBackendStats> cuda_backend_stats(Backend& backend) {
  KILN_ASSIGN_OR_RETURN(CudaBackend * be, as_cuda(backend));
  CudaBackendStats s;
  cuda::MatmulCacheStats m = be->linear_impl().cache_stats();
  s.matmul_cache_hits = m.hits;
  s.matmul_cache_misses = m.misses;
  s.matmul_cache_entries = m.entries;
  s.matmul_plans_timed = m.timed;
  s.cublaslt_matmuls = m.hits + m.misses;  // every cuBLASLt matmul looks its plan up once
  s.launches = cuda::kernel_launch_count().load();
  s.graph_recordings = be->replay_impl().recordings();
  s.graph_replays = be->replay_impl().replays();
  s.synchronizations = be->context().synchronizations.load();
  s.host_wait_seconds = static_cast<double>(be->context().host_wait_ns.load()) * 1e-9;
  s.bytes_to_host = be->context().bytes_to_host.load();
  if (const char* form = be->context().last_gdn_backward.load(); form != nullptr) s.gdn_backward = form;
  cuda::PoolStats p = be->context().pool->stats();
  s.pool_hits = p.hits;
  s.pool_misses = p.misses;
  s.pool_reserved_bytes = p.reserved_bytes;
  s.pool_peak_in_use_bytes = p.peak_in_use_bytes;
  s.pool_in_use_bytes = p.in_use_bytes;
  s.recording_pool_reserved_bytes = be->context().recording_pool->stats().reserved_bytes;
  if (be->context().budget) s.pool_limit_bytes = be->context().budget->limit().pool_bytes;
  size_t free_b = 0, total_b = 0;
  KILN_RETURN_IF_ERROR(cuda::cuda_status(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo"));
  s.device_used_bytes = total_b - free_b;
  s.device_total_bytes = total_b;
  return s;
}

Status cuda_reset_peak_memory(Backend& backend) {
  KILN_ASSIGN_OR_RETURN(CudaBackend * be, as_cuda(backend));
  be->context().pool->reset_peak();
  return {};
}

Result<double> cuda_device_copy_bandwidth(Backend& backend, size_t bytes) {
  KILN_ASSIGN_OR_RETURN(CudaBackend * be, as_cuda(backend));
  cuda::Context& ctx = be->context();
  KILN_ASSIGN_OR_RETURN(Tensor a, ctx.empty({static_cast<int64_t>(bytes)}, DType::kU8));
  KILN_ASSIGN_OR_RETURN(Tensor b, ctx.empty({static_cast<int64_t>(bytes)}, DType::kU8));
  KILN_RETURN_IF_ERROR(cuda::cuda_status(cudaMemsetAsync(a.raw(), 1, bytes, ctx.stream), "copy bandwidth: fill"));
  cudaEvent_t start = nullptr, stop = nullptr;
  KILN_RETURN_IF_ERROR(cuda::cuda_status(cudaEventCreate(&start), "copy bandwidth: event"));
  KILN_RETURN_IF_ERROR(cuda::cuda_status(cudaEventCreate(&stop), "copy bandwidth: event"));
  std::vector<float> ms;
  Status st;
  for (int rep = 0; rep < 8 && st.ok(); ++rep) {
    cudaEventRecord(start, ctx.stream);
    cudaMemcpyAsync(b.raw(), a.raw(), bytes, cudaMemcpyDeviceToDevice, ctx.stream);
    cudaEventRecord(stop, ctx.stream);
    st = cuda::cuda_status(cudaEventSynchronize(stop), "copy bandwidth: copy");
    float t = 0.f;
    if (st.ok()) st = cuda::cuda_status(cudaEventElapsedTime(&t, start, stop), "copy bandwidth: time");
    if (rep > 0) ms.push_back(t);  // the first copy warms up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  KILN_RETURN_IF_ERROR(st);
  std::sort(ms.begin(), ms.end());
  const double median_s = ms[ms.size() / 2] * 1e-3;
  return 2.0 * static_cast<double>(bytes) / median_s;
}

}  // namespace kiln
