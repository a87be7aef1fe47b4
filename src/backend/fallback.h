// What a backend's decline means: generic operations may round-trip through host memory where
// the policy allows (every such trip counted per backend and operand arity); hot paths on an
// accelerator require native execution, and a native miss there is an error.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

#include "backend/support.h"
#include "core/status.h"

namespace kiln {

enum class OpClass : uint8_t { kGenericOp, kDecodeHotPath, kTrainingOptimizer };
std::string_view op_class_name(OpClass c);

enum class FallbackMode : uint8_t {
  kReference,           // the backend is the reference: nothing to fall back to
  kCorrectnessAllowed,  // a host path may run for correctness (the CPU's decode)
  kHostRoundTrip,       // a declined op is staged through host memory and counted
  kStrict,              // a native miss is an error
  kNativeRequired,      // a native miss is an error, checked before any work starts
};
std::string_view fallback_mode_name(FallbackMode m);

struct FallbackPolicy {
  FallbackMode generic_op = FallbackMode::kReference;
  FallbackMode decode_hot_path = FallbackMode::kReference;
  FallbackMode training_optimizer = FallbackMode::kReference;
  FallbackMode mode_for(OpClass c) const;
};

enum class FallbackDecision : uint8_t { kRunNative, kRunOnHost };

// Process-wide host-fallback counters, per backend and per operand arity (1..3).
class FallbackCounters {
 public:
  static constexpr int kMaxArity = 3;
  static constexpr int kBackends = 5;
  static constexpr std::array<std::string_view, kBackends> kBackendNames = {"cpu", "cuda", "vulkan", "rocm", "metal"};
  static FallbackCounters& global();
  void record(std::string_view backend, int arity);
  uint64_t count(std::string_view backend, int arity) const;
  uint64_t total(std::string_view backend) const;
  void reset();

 private:
  static int backend_index(std::string_view backend);  // -1 when unknown
  std::array<std::array<std::atomic<uint64_t>, kMaxArity>, kBackends> counts_{};
};

// Applies the policy to one support answer. kRunOnHost has already been counted; an error names
// the backend, the operation class, the request and the constraint that declined it.
Result<FallbackDecision> resolve_fallback(const FallbackPolicy& policy, std::string_view backend,
                                          OpClass op_class, int arity, const Support& support,
                                          const std::string& request);

}  // namespace kiln
