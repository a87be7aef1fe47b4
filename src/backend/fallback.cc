#include "backend/fallback.h"

namespace kiln {

std::string_view op_class_name(OpClass c) {
  switch (c) {
    case OpClass::kGenericOp: return "generic_op";
    case OpClass::kDecodeHotPath: return "decode_hot_path";
    case OpClass::kTrainingOptimizer: return "training_optimizer";
  }
  return "?";
}

std::string_view fallback_mode_name(FallbackMode m) {
  switch (m) {
    case FallbackMode::kReference: return "reference";
    case FallbackMode::kCorrectnessAllowed: return "correctness_allowed";
    case FallbackMode::kHostRoundTrip: return "host_round_trip_counted";
    case FallbackMode::kStrict: return "strict_native_miss_errors";
    case FallbackMode::kNativeRequired: return "native_required";
  }
  return "?";
}

FallbackMode FallbackPolicy::mode_for(OpClass c) const {
  switch (c) {
    case OpClass::kGenericOp: return generic_op;
    case OpClass::kDecodeHotPath: return decode_hot_path;
    case OpClass::kTrainingOptimizer: return training_optimizer;
  }
  return FallbackMode::kStrict;
}

FallbackCounters& FallbackCounters::global() {
  static FallbackCounters counters;
  return counters;
}

int FallbackCounters::backend_index(std::string_view b) {
  for (int i = 0; i < kBackends; ++i)
    if (kBackendNames[i] == b) return i;
  return -1;
}

void FallbackCounters::record(std::string_view backend, int arity) {
  int b = backend_index(backend);
  if (b < 0 || arity < 1 || arity > kMaxArity) return;
  counts_[b][arity - 1].fetch_add(1, std::memory_order_relaxed);
}

uint64_t FallbackCounters::count(std::string_view backend, int arity) const {
  int b = backend_index(backend);
  if (b < 0 || arity < 1 || arity > kMaxArity) return 0;
  return counts_[b][arity - 1].load(std::memory_order_relaxed);
}

uint64_t FallbackCounters::total(std::string_view backend) const {
  uint64_t t = 0;
  for (int a = 1; a <= kMaxArity; ++a) t += count(backend, a);
  return t;
}

void FallbackCounters::reset() {
  for (auto& row : counts_)
    for (auto& c : row) c.store(0, std::memory_order_relaxed);
}

Result<FallbackDecision> resolve_fallback(const FallbackPolicy& policy, std::string_view backend,
                                          OpClass op_class, int arity, const Support& support,
                                          const std::string& request) {
  if (support.runs_natively()) return FallbackDecision::kRunNative;
  FallbackMode mode = policy.mode_for(op_class);
  bool host_ok = support.state == SupportState::kHostFallbackAllowed &&
                 (mode == FallbackMode::kHostRoundTrip || mode == FallbackMode::kCorrectnessAllowed);
  if (host_ok) {
    FallbackCounters::global().record(backend, arity);
    return FallbackDecision::kRunOnHost;
  }
  return unsupported(std::string(backend) + " cannot run " + std::string(op_class_name(op_class)) + " " +
                     request + " (" + std::string(support_state_name(support.state)) +
                     (support.constraint.empty() ? "" : ": " + support.constraint) + "); policy is " +
                     std::string(fallback_mode_name(mode)));
}

}  // namespace kiln
