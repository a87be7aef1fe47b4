#include "backend/cuda/kernel_timing.h"

#include <algorithm>

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/tuning.h"

namespace kiln::cuda {

int64_t l2_flush_bytes() { return std::max<int64_t>(device_target().l2_bytes, 1 << 20) * 2; }

KernelChoices& kernel_choices() {
  static KernelChoices choices = [] {
    int driver = 0;
    if (cudaDriverGetVersion(&driver) != cudaSuccess) (void)cudaGetLastError();
    const DeviceTarget& t = device_target();
    return KernelChoices(default_choices_file(), t.name + ", driver " + std::to_string(driver) + ", " + t.label());
  }();
  return choices;
}

namespace {

// Each candidate's best time in microseconds, in the order given.
Result<std::vector<TimedCandidate>> time_candidates(Context& ctx, const std::vector<Candidate>& candidates) {
  const int64_t flush_bytes = l2_flush_bytes();
  KILN_ASSIGN_OR_RETURN(Tensor flush, ctx.empty({flush_bytes}, DType::kU8));
  cudaEvent_t start = nullptr, stop = nullptr;
  KILN_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&start), "kernel timing: event"));
  if (Status s = cuda_status(cudaEventCreate(&stop), "kernel timing: event"); !s.ok()) {
    cudaEventDestroy(start);
    return s;
  }
  std::vector<TimedCandidate> times;
  Status st = [&]() -> Status {
    for (const Candidate& c : candidates) {
      KILN_RETURN_IF_ERROR(c.run().with_context("timing " + c.name));
      double best = 1e300;
      for (int rep = 0; rep < 5; ++rep) {
        KILN_RETURN_IF_ERROR(cuda_status(
            cudaMemsetAsync(flush.raw(), rep, static_cast<size_t>(flush_bytes), ctx.stream), "kernel timing: flush"));
        cudaEventRecord(start, ctx.stream);
        KILN_RETURN_IF_ERROR(c.run().with_context("timing " + c.name));
        cudaEventRecord(stop, ctx.stream);
        KILN_RETURN_IF_ERROR(ctx.synchronize("kernel timing"));
        float ms = 0.f;
        KILN_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&ms, start, stop), "kernel timing: elapsed"));
        best = std::min(best, 1e3 * ms);
      }
      times.push_back({c.name, best});
    }
    return {};
  }();
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  KILN_RETURN_IF_ERROR(st);
  return times;
}

}  // namespace

Result<std::string> choose_kernel(Context& ctx, const std::string& key, const std::vector<Candidate>& candidates,
                                  std::string_view rule, std::string_view preferred,
                                  const std::function<Status()>& prepare) {
  auto offered = [&](const std::string& name) {
    return std::any_of(candidates.begin(), candidates.end(), [&](const Candidate& c) { return c.name == name; });
  };
  if (candidates.size() == 1) return candidates.front().name;
  if (const std::optional<std::string> known = kernel_choices().find(key); known && offered(*known)) return *known;
  if (!tuning().gemm_autotune || ctx.recording()) {
    if (tuning().gemm_autotune) kernel_choices().put(key, std::string(rule));
    return std::string(rule);
  }
  // Without room for the candidates' scratch: the rule now, timed at a later call.
  if (prepare && !prepare().ok()) return std::string(rule);
  Result<std::vector<TimedCandidate>> times = time_candidates(ctx, candidates);
  if (!times.ok()) return times.status().with_context("timing " + key);
  const std::string pick = pick_fastest(times.value(), preferred);
  kernel_choices().put(key, pick, times.value());
  return pick;
}

}  // namespace kiln::cuda
