#include "backend/cuda/gemm_autotune.h"

#include <limits>
#include <string>

#include "backend/cuda/blas.h"
#include "backend/cuda/context.h"

namespace kiln::cuda {

namespace {

constexpr int kRuns = 3;
// Another candidate replaces the heuristic's pick only when it is this much faster: a choice
// that timing noise could flip either way is not worth a different rounding between runs.
constexpr float kMargin = 0.97f;

// Owns the two events of a timing and destroys them on every path out.
struct EventPair {
  cudaEvent_t begin = nullptr, end = nullptr;
  ~EventPair() {
    if (begin != nullptr) cudaEventDestroy(begin);
    if (end != nullptr) cudaEventDestroy(end);
  }
};

}  // namespace

Result<size_t> fastest_algorithm(const GemmTrial& t, std::span<const cublasLtMatmulHeuristicResult_t> candidates) {
  if (candidates.empty()) return invalid_argument("gemm autotune: no candidate algorithms");
  EventPair ev;
  KILN_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&ev.begin), "gemm autotune: cudaEventCreate"));
  KILN_RETURN_IF_ERROR(cuda_status(cudaEventCreate(&ev.end), "gemm autotune: cudaEventCreate"));
  const float alpha = 1.f, beta = 0.f;
  auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return cublasLtMatmul(t.handle, t.desc, &alpha, t.A, t.a, t.B, t.b, &beta, t.D, t.c, t.D, t.c, &algo, t.workspace,
                          t.workspace_bytes, t.stream);
  };
  size_t best = candidates.size(), first = candidates.size();
  float best_ms = std::numeric_limits<float>::infinity(), first_ms = best_ms;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const cublasLtMatmulHeuristicResult_t& c = candidates[i];
    if (c.state != CUBLAS_STATUS_SUCCESS || c.workspaceSize > t.workspace_bytes) continue;
    if (run(c.algo) != CUBLAS_STATUS_SUCCESS) continue;  // the first run also loads its kernel
    float fastest = std::numeric_limits<float>::infinity();
    bool runs = true;
    for (int r = 0; r < kRuns && runs; ++r) {
      KILN_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(t.flush, r, t.flush_bytes, t.stream), "gemm autotune: L2 flush"));
      KILN_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ev.begin, t.stream), "gemm autotune: cudaEventRecord"));
      const cublasStatus_t s = run(c.algo);
      KILN_RETURN_IF_ERROR(cuda_status(cudaEventRecord(ev.end, t.stream), "gemm autotune: cudaEventRecord"));
      KILN_RETURN_IF_ERROR(cuda_status(cudaEventSynchronize(ev.end), "gemm autotune: cudaEventSynchronize"));
      runs = s == CUBLAS_STATUS_SUCCESS;
      float ms = 0.f;
      KILN_RETURN_IF_ERROR(cuda_status(cudaEventElapsedTime(&ms, ev.begin, ev.end), "gemm autotune: cudaEventElapsedTime"));
      if (ms < fastest) fastest = ms;
    }
    if (!runs) continue;
    if (first == candidates.size()) {
      first = i;
      first_ms = fastest;
    }
    if (best == candidates.size() || fastest < best_ms) {
      best = i;
      best_ms = fastest;
    }
  }
  if (best == candidates.size()) return unsupported("gemm autotune: none of " + std::to_string(candidates.size()) + " candidates runs");
  return best_ms < kMargin * first_ms ? best : first;
}

}  // namespace kiln::cuda
