// The Vulkan implementations of each facet, one class per facet (each in its own .cc). All share
// one Context: every dispatch and copy is ordered on its queue.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "backend/arg_checks.h"
#include "backend/facets.h"
#include "backend/replay.h"
#include "backend/vulkan/context.h"

namespace kiln::vulkan {

// check_native_call (backend/arg_checks.h) for this backend.
template <typename Facet, typename Args>
Status check_args(const Facet& facet, const Args& args) {
  return check_native_call(facet, args, "vulkan", DeviceKind::kVulkan);
}

// A size, stride or count as a shader's 32-bit push constant (each facet's predicate bounds them).
inline uint32_t u32(int64_t v) { return static_cast<uint32_t>(v); }

// A tensor's device address, for a shader's push constants (0 for an undefined tensor).
inline uint64_t address(const Tensor& t) {
  return t.defined() ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.raw())) : 0;
}

class Storage final : public StorageFacet {
 public:
  explicit Storage(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_STORAGE_OVERRIDES
  Result<Tensor> empty(Shape shape, DType dtype) override;
  Result<std::shared_ptr<kiln::Storage>> weight_arena(size_t bytes) override;

 private:
  std::shared_ptr<Context> ctx_;
};

class Linear final : public LinearFacet {
 public:
  explicit Linear(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_LINEAR_OVERRIDES
  // The products share one barrier and overlap where no output overlaps x or another output.
  Status matmul_group(const MatmulGroupArgs& a) override;

 private:
  std::shared_ptr<Context> ctx_;
};

class Norm final : public NormFacet {
 public:
  explicit Norm(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_NORM_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

class Attention final : public AttentionFacet {
 public:
  explicit Attention(std::shared_ptr<Context> ctx);
  KILN_ATTENTION_OVERRIDES

 private:
  // Rope's inverse frequencies on the device, made once per (theta, rotary_dim).
  Result<Tensor> inv_freq(float theta, int64_t rotary_dim);
  // Prefill attention over query tiles (attention_tiled.comp); false where the call does not
  // suit it (then attention.comp runs).
  Result<bool> attend_tiled(const AttentionArgs& a);

  std::shared_ptr<Context> ctx_;
  bool tiled_prefill_ = true;  // KILN_VULKAN_TILED_PREFILL=0 turns it off
  std::mutex mu_;
  std::map<std::pair<float, int64_t>, Tensor> inv_freq_;
};

class Conv final : public ConvFacet {
 public:
  explicit Conv(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_CONV_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

class Gdn final : public GdnFacet {
 public:
  explicit Gdn(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_GDN_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

class Elementwise final : public ElementwiseFacet {
 public:
  explicit Elementwise(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_ELEMENTWISE_OVERRIDES

 private:
  std::shared_ptr<Context> ctx_;
};

class Sampling final : public SamplingFacet {
 public:
  explicit Sampling(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  KILN_SAMPLING_OVERRIDES
  Status sample(const SampleArgs& a) override;

 private:
  std::shared_ptr<Context> ctx_;
  std::mutex mu_;                // sample()'s tables below
  std::vector<uint32_t> marks_;  // a token's last row stamp (the distinct penalised tokens)
  std::vector<int32_t> slots_;   // its entry among the row's penalties, where marked
  uint32_t stamp_ = 0;
};

// Recording and replaying facet calls: command buffers recorded once, submitted again (replay.cc).
class Replay final : public ReplayFacet {
 public:
  explicit Replay(std::shared_ptr<Context> ctx) : ctx_(std::move(ctx)) {}
  bool available() const override { return !ctx_->profiling(); }  // timestamps are per eager command
  Result<std::unique_ptr<Recording>> record(const std::function<Status()>& body) override;
  Status replay(const Recording& r) override;

 private:
  std::shared_ptr<Context> ctx_;
};

// Where the device has cooperative matrices: one product for each 16-bit weight dtype on
// matmul_coop.comp against the f32 tiled matmul, at startup; a refused pipeline or a
// disagreement beyond the f32 rounding turns them off, naming why on stderr. An error only where
// the device cannot run the check at all.
Status check_cooperative_matrix(const std::shared_ptr<Context>& ctx);

}  // namespace kiln::vulkan
