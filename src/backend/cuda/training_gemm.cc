// out[m, n] (+)= alpha op(a) op(b) through cuBLAS on the Context's stream. Row-major operands are
// read as their column-major transposes: out^T = op(b)^T op(a)^T, so cuBLAS sees b first, then a,
// each with the leading dimension of its row stride and its own transpose flag. f32 b: an f32
// GEMM with f32 compute (default math mode: no TF32). bf16/f16 b (a frozen weight): a is first
// rounded to b's dtype into a contiguous scratch, then a 16-bit x 16-bit GEMM with f32 compute and
// f32 output: the precision contract of the serving forward (linear.cc).
#include <climits>
#include <string>

#include "backend/cuda/blas.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/training.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

namespace {

// The leading dimension cuBLAS is given for a row-major [rows, cols] view: its row stride. A
// single row may carry any stride (a one-row slice of a wider tensor), which cuBLAS would reject
// below cols; its value is never used then, so cols stands in.
int64_t leading_dim(const Tensor& t) { return t.dim(0) == 1 ? t.dim(1) : t.stride(0); }

}  // namespace

// Strides: validation already refuses a non-unit column stride (every tensor here is unit-stride
// in its last dimension), so the predicate only bounds the sizes cuBLAS's int arguments carry.
Support Training::supports_gemm(const TrainRequest& r) {
  if (r.dtype != DType::kF32 && r.dtype != DType::kBF16 && r.dtype != DType::kF16)
    return Support::declined("b must be f32, bf16 or f16");
  if (r.tokens <= 0 || r.width <= 0 || r.inner <= 0) return Support::declined("gemm sizes must be positive");
  if (r.tokens > INT_MAX || r.width > INT_MAX || r.inner > INT_MAX)
    return Support::declined("gemm sizes must fit cuBLAS's 32-bit int");
  if (r.dtype != DType::kF32)
    return Support::constrained("op(a) is rounded to " + std::string(dtype_name(r.dtype)) +
                                " for the tensor-core GEMM; f32 accumulation and output");
  return Support::native();
}

Status Training::gemm(const GemmArgs& g) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, g, "cuda", DeviceKind::kCuda));
  const int64_t M = g.out.dim(0), N = g.out.dim(1), K = g.trans_a ? g.a.dim(0) : g.a.dim(1);
  int64_t lda = leading_dim(g.a);
  const int64_t ldb = leading_dim(g.b), ldo = leading_dim(g.out);
  // cuBLAS requires ld >= the rows of the column-major view (the row-major column count).
  if (lda < g.a.dim(1) || ldb < g.b.dim(1) || ldo < N)
    return invalid_argument(req + ": rows overlap (a row stride below the row length) in a " + g.a.describe() +
                            ", b " + g.b.describe() + " or out " + g.out.describe());
  if (lda > INT_MAX || ldb > INT_MAX || ldo > INT_MAX)
    return invalid_argument(req + ": a row stride exceeds cuBLAS's 32-bit int");
  KILN_ASSIGN_OR_RETURN(cublasHandle_t h, ctx_->blas());
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return "train gemm " + std::string(dtype_name(g.b.dtype())) + " m=" + std::to_string(M) +
           " n=" + std::to_string(N) + " k=" + std::to_string(K);
  });

  const DType bt = g.b.dtype();
  const void* a_ptr = g.a.raw();
  Tensor rounded;  // op(a) rounded to b's dtype; back to the pool when the call returns (stream order)
  if (bt != DType::kF32) {
    KILN_ASSIGN_OR_RETURN(rounded, ctx_->empty({g.a.dim(0), g.a.dim(1)}, bt));
    ConvertParams cp;
    cp.rows = g.a.dim(0);
    cp.cols = g.a.dim(1);
    cp.src = g.a.data<float>();
    cp.src_stride = g.a.stride(0);
    cp.dst = rounded.raw();
    cp.dst_stride = g.a.dim(1);
    cp.dst_dtype = bt;
    KILN_RETURN_IF_ERROR(convert_f32(cp, ctx_->stream).with_context(req));
    a_ptr = rounded.raw();
    lda = g.a.dim(1);
  }
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const float alpha = g.alpha, beta = g.accumulate ? 1.f : 0.f;
  kernel_launch_count().fetch_add(1, std::memory_order_relaxed);  // one cuBLAS GEMM, counted as one launch
  return blas_status(cublasGemmEx(h, op_b, op_a, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                                  g.b.raw(), cuda_data_type(bt), static_cast<int>(ldb), a_ptr, cuda_data_type(bt),
                                  static_cast<int>(lda), &beta, g.out.raw(), CUDA_R_32F, static_cast<int>(ldo),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublas gemm " + req);
}

}  // namespace kiln::cuda
