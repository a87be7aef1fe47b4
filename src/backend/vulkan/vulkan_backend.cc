#include "backend/vulkan/vulkan_backend.h"

#include "backend/declining_training.h"
#include "backend/vulkan/vulkan_facets.h"

namespace kiln {

namespace {

BackendCapabilities vulkan_capabilities(const vulkan::DeviceInfo& info) {
  BackendCapabilities c;
  c.storage.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.storage.activation_dtype = DType::kF32;
  c.storage.zero_copy_host_weights = false;  // uploaded once through the staging ring
  c.storage.device_memory_bytes = info.device_local_bytes;
  c.compute.target = "vulkan " + std::to_string(VK_API_VERSION_MAJOR(info.api_version)) + "." +
                     std::to_string(VK_API_VERSION_MINOR(info.api_version)) + ", subgroup " +
                     std::to_string(info.subgroup_size) + (info.cooperative_matrix ? ", cooperative matrices" : "");
  c.compute.shared_memory_per_block = info.shared_memory_bytes;
  c.matmul.engine = info.cooperative_matrix
                       ? "compute shaders with cooperative matrices (16-bit weights as f16, x rounded to f16, "
                         "f32 accumulation) past 8 rows"
                       : "compute shaders: 16-bit weights widened in the shader, f32 accumulation";
  c.matmul.weight_dtypes = {DType::kF32, DType::kBF16, DType::kF16};
  c.attention.block_size = 64;
  c.attention.kv_dtypes = {DType::kF32};
  c.gdn.state_dtype = DType::kF32;
  c.streaming_prefill = {true, 8192, 4096};
  c.decode.batched = true;
  c.decode_execution.mode = "graph_replay";
  c.training.supported = false;
  c.replay.graphs = true;
  c.replay.captured = "the engine's decode step per batch bucket: one command buffer recorded, submitted again";
  // A generic op it declines would round-trip through the host, counted (none of the engine's is).
  c.fallback = {FallbackMode::kHostRoundTrip, FallbackMode::kNativeRequired, FallbackMode::kNativeRequired};
  return c;
}

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::shared_ptr<vulkan::Context> ctx)
      : ctx_(ctx), caps_(vulkan_capabilities(ctx->info())), storage_(ctx), linear_(ctx), norm_(ctx),
        attention_(ctx), conv_(ctx), gdn_(ctx), elementwise_(ctx), sampling_(ctx), replay_(ctx),
        training_("the vulkan backend does not train"), optimizer_("the vulkan backend does not train") {
    id_.name = "vulkan";
    id_.device_name = ctx->info().name + " (" + ctx->info().type_name() + ", " + ctx->info().driver + ")";
    id_.driver = ctx->info().driver;
    id_.device = Device{DeviceKind::kVulkan, 0};
    id_.warning = ctx->info().warning;
  }
  ~VulkanBackend() override { (void)ctx_->synchronize(); }
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
    m.what = "device memory this process holds from the Vulkan driver (pool chunks, weights, staging)";
    m.used_bytes = static_cast<int64_t>(ctx_->memory().stats().reserved_bytes);
    m.total_bytes = static_cast<int64_t>(ctx_->info().device_local_bytes);
    return m;
  }
  vulkan::Context& context() { return *ctx_; }

 private:
  std::shared_ptr<vulkan::Context> ctx_;
  BackendIdentity id_;
  const BackendCapabilities caps_;
  vulkan::Storage storage_;
  vulkan::Linear linear_;
  vulkan::Norm norm_;
  vulkan::Attention attention_;
  vulkan::Conv conv_;
  vulkan::Gdn gdn_;
  vulkan::Elementwise elementwise_;
  vulkan::Sampling sampling_;
  vulkan::Replay replay_;
  DecliningTraining training_;
  DecliningOptimizer optimizer_;
};

}  // namespace

Result<std::unique_ptr<Backend>> make_vulkan_backend(const vulkan::DeviceChoice& choice) {
  KILN_ASSIGN_OR_RETURN(std::shared_ptr<vulkan::Context> ctx, vulkan::Context::create(choice));
  KILN_RETURN_IF_ERROR(vulkan::check_cooperative_matrix(ctx));
  return std::unique_ptr<Backend>(std::make_unique<VulkanBackend>(std::move(ctx)));
}

Result<VulkanStats> vulkan_backend_stats(Backend& backend) {
  auto* vk = dynamic_cast<VulkanBackend*>(&backend);
  if (!vk) return invalid_argument("vulkan_backend_stats: backend '" + backend.identity().name + "' is not vulkan");
  VulkanStats s;
  s.memory = vk->context().memory().stats();
  s.dispatches = vk->context().dispatches();
  s.submits = vk->context().submits();
  s.replays = vk->context().replays();
  return s;
}

}  // namespace kiln
