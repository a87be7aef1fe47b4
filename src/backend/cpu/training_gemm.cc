// out (+)= alpha op(a) op(b) for the backward's activation and LoRA-factor gradients. f32 b runs
// as sgemm over blocks of output rows; a bf16/f16 weight is converted to f32 one block of output
// columns at a time (as linear.cc does), so a frozen weight is never held in f32 whole.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_facets.h"
#include "backend/training_checks.h"
#include "core/thread_pool.h"

namespace kiln::cpu {

namespace {
constexpr int64_t kRowBlock = 64;  // output rows per task (f32 b)
constexpr int64_t kColTile = 64;   // output columns per converted weight tile
}  // namespace

Status Training::gemm(const GemmArgs& g) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, g, "cpu", DeviceKind::kHost));
  const int64_t M = g.out.dim(0), N = g.out.dim(1), K = g.trans_a ? g.a.dim(0) : g.a.dim(1);
  const int lda = static_cast<int>(g.a.stride(0)), ldo = static_cast<int>(g.out.stride(0));
  const CBLAS_TRANSPOSE ta = g.trans_a ? CblasTrans : CblasNoTrans, tb = g.trans_b ? CblasTrans : CblasNoTrans;
  const float beta = g.accumulate ? 1.f : 0.f;
  const float* a = g.a.data<float>();
  float* out = g.out.data<float>();
  ThreadPool& pool = default_thread_pool();

  if (g.b.dtype() == DType::kF32) {
    const float* b = g.b.data<float>();
    const int ldb = static_cast<int>(g.b.stride(0));
    pool.parallel_for((M + kRowBlock - 1) / kRowBlock, 1, [&](int64_t i0, int64_t i1, int) {
      for (int64_t i = i0; i < i1; ++i) {
        const int64_t m0 = i * kRowBlock, mt = std::min(kRowBlock, M - m0);
        const float* ai = g.trans_a ? a + m0 : a + m0 * lda;
        cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(mt), static_cast<int>(N), static_cast<int>(K), g.alpha, ai,
                    lda, b, ldb, beta, out + m0 * ldo, ldo);
      }
    });
    return {};
  }

  const DType bt = g.b.dtype();
  const uint16_t* b = g.b.data<uint16_t>();
  const int64_t bcols = g.b.dim(1);
  pool.parallel_for((N + kColTile - 1) / kColTile, 1, [&](int64_t j0, int64_t j1, int) {
    std::vector<float> buf;
    for (int64_t j = j0; j < j1; ++j) {
      const int64_t n0 = j * kColTile, nt = std::min(kColTile, N - n0);
      buf.resize(static_cast<size_t>(nt * K));
      int ldb;
      if (g.trans_b) {  // b [N, K]: rows n0.. are contiguous
        to_f32(bt, b + n0 * K, buf.data(), static_cast<size_t>(nt * K));
        ldb = static_cast<int>(K);
      } else {  // b [K, N]: columns n0.. of every row
        for (int64_t k = 0; k < K; ++k) to_f32(bt, b + k * bcols + n0, buf.data() + k * nt, static_cast<size_t>(nt));
        ldb = static_cast<int>(nt);
      }
      cblas_sgemm(CblasRowMajor, ta, tb, static_cast<int>(M), static_cast<int>(nt), static_cast<int>(K), g.alpha, a,
                  lda, buf.data(), ldb, beta, out + n0, ldo);
    }
  });
  return {};
}

}  // namespace kiln::cpu
