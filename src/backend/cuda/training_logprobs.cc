// Fused linear log-probs (backend/training_facets.h) and their backward on the device: the
// vocabulary is walked in chunks; per chunk one cuBLAS GEMM writes the chunk's logits for every
// token into a scratch of at most ~256 MB, and a kernel (kernels/token_logprobs.cu) folds them
// into a running log-sum-exp (forward) or turns them into G = coef (onehot - p) for
// dhidden += G W_chunk (backward), so [tokens, vocab] logits never exist.
// Precision follows the serving forward (linear.cc): with a bf16/f16 LM head the hidden states are
// rounded to the head's dtype once and the logits GEMMs run on tensor cores with f32
// accumulation. The backward's G is rounded to bf16 for a bf16 head; for an f16 head it stays f32
// and the head's chunk is widened to f32 instead (f16 would flush coef * p, often below 1e-8, to
// zero). An f32 LM head runs f32 GEMMs throughout (CUBLAS_COMPUTE_32F on the handle
// Context::blas() keeps in CUBLAS_DEFAULT_MATH: no TF32).
#include <cublas_v2.h>

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

#include "backend/cuda/blas.h"
#include "backend/cuda/kernels/elementwise.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/token_logprobs.h"
#include "backend/cuda/training.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

namespace {

// Chunk widths: the [tokens, chunk] f32 logits stay under kScratchBytes down to kMinChunk (then
// grow with the tokens); kMaxChunk keeps the GEMM a few launches wide even for a few tokens.
constexpr int64_t kScratchBytes = int64_t{256} << 20;
constexpr int64_t kMinChunk = 4096, kMaxChunk = 16384;

int64_t vocab_chunk(int64_t tokens, int64_t vocab) {
  const int64_t c = std::clamp(kScratchBytes / (4 * tokens), kMinChunk, kMaxChunk) / 128 * 128;
  return std::min(c, vocab);
}

// Row v0 of the [vocab, width] head.
const void* head_row(const Tensor& head, int64_t v0) {
  return static_cast<const char*>(head.raw()) + v0 * head.dim(1) * static_cast<int64_t>(dtype_size(head.dtype()));
}

// The GEMM's hidden operand: the f32 rows as they are for an f32 head, else rounded to the head's
// dtype into a contiguous scratch (`keep`).
struct HiddenOperand {
  const void* data = nullptr;
  int64_t ld = 0;
  Tensor keep;
};

Result<HiddenOperand> hidden_operand(Context& ctx, const Tensor& hidden, DType head, const std::string& req) {
  const int64_t T = hidden.dim(0), W = hidden.dim(1);
  HiddenOperand op;
  if (head == DType::kF32) {
    if (T > 1 && hidden.stride(0) < W)
      return invalid_argument(req + ": hidden's rows overlap (row stride " + std::to_string(hidden.stride(0)) +
                              " < width " + std::to_string(W) + ")");
    op.data = hidden.raw();
    op.ld = T > 1 ? hidden.stride(0) : W;
    return op;
  }
  KILN_ASSIGN_OR_RETURN(op.keep, ctx.empty({T, W}, head));
  ConvertParams c;
  c.rows = T;
  c.cols = W;
  c.src = hidden.data<float>();
  c.src_stride = hidden.stride(0);
  c.dst = op.keep.raw();
  c.dst_stride = W;
  c.dst_dtype = head;
  KILN_RETURN_IF_ERROR(convert_f32(c, ctx.stream));
  op.data = op.keep.raw();
  op.ld = W;
  return op;
}

// logits[T, n] (row-major, ld n) = hidden W[v0 : v0 + n]^T. Column-major: logits^T = W_chunk^T-op
// x hidden^T, A = the chunk's rows (W x n, ld W, transposed), B = hidden (W x T, ld).
Status chunk_logits(cublasHandle_t h, const HiddenOperand& x, const Tensor& head, int64_t T, int64_t v0, int64_t n,
                    float* logits) {
  const int64_t W = head.dim(1);
  const DType dt = head.dtype();
  const void* a = head_row(head, v0);
  const float alpha = 1.f, beta = 0.f;
  kernel_launch_count().fetch_add(1, std::memory_order_relaxed);
  return blas_status(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(T),
                                  static_cast<int>(W), &alpha, a, cuda_data_type(dt), static_cast<int>(W), x.data,
                                  cuda_data_type(dt), static_cast<int>(x.ld), &beta, logits, CUDA_R_32F,
                                  static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx logits chunk v0=" + std::to_string(v0) + " n=" + std::to_string(n));
}

// dhidden[T, W] (ld) (+)= G[T, n] rows[n, W], both operands in `dt`, rows = the head's rows
// v0 : v0 + n. Column-major: dhidden^T = rows^T G^T, A = rows (W x n, ld W), B = G (n x T, ld n),
// C = dhidden (W x T, ld).
Status chunk_dhidden(cublasHandle_t h, const void* g, const void* a, DType dt, int64_t W, int64_t T, int64_t v0,
                     int64_t n, float* dh, int64_t ld, bool add) {
  const float alpha = 1.f, beta = add ? 1.f : 0.f;
  kernel_launch_count().fetch_add(1, std::memory_order_relaxed);
  return blas_status(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(W), static_cast<int>(T),
                                  static_cast<int>(n), &alpha, a, cuda_data_type(dt), static_cast<int>(W), g,
                                  cuda_data_type(dt), static_cast<int>(n), &beta, dh, CUDA_R_32F, static_cast<int>(ld),
                                  CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx dhidden chunk v0=" + std::to_string(v0) + " n=" + std::to_string(n));
}

// Targets must lie below the vocabulary (< 0: no target), as on the CPU backend. Costs one small
// copy and a synchronisation of the stream per call.
Status check_targets(Context& ctx, const Tensor& targets, int64_t vocab, const std::string& req) {
  std::vector<int32_t> tg(static_cast<size_t>(targets.dim(0)));
  KILN_RETURN_IF_ERROR(cuda_status(
      cudaMemcpyAsync(tg.data(), targets.raw(), tg.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, ctx.stream),
      req + ": copy targets"));
  KILN_RETURN_IF_ERROR(ctx.synchronize(req + ": copy targets"));
  for (size_t t = 0; t < tg.size(); ++t)
    if (tg[t] >= vocab)
      return invalid_argument(req + ": target " + std::to_string(tg[t]) + " at token " + std::to_string(t) +
                              " is outside the vocabulary of " + std::to_string(vocab));
  return {};
}

Status checked_dhidden(const Tensor& dh, const std::string& req) {
  if (dh.dim(0) > 1 && dh.stride(0) < dh.dim(1))
    return invalid_argument(req + ": dhidden's rows overlap (row stride " + std::to_string(dh.stride(0)) + " < width " +
                            std::to_string(dh.dim(1)) + ")");
  return {};
}

}  // namespace

Support Training::supports_logprobs(const TrainRequest& r) {
  if (r.dtype != DType::kF32 && r.dtype != DType::kBF16 && r.dtype != DType::kF16)
    return Support::declined("lm_head must be f32, bf16 or f16");
  if (r.tokens <= 0 || r.width <= 0 || r.out <= 0) return Support::declined("tokens, width and vocab must be positive");
  if (r.tokens > INT_MAX || r.width > INT_MAX || r.out > INT_MAX)
    return Support::declined("tokens, width and vocab must fit cuBLAS's 32-bit sizes");
  if (r.dtype == DType::kBF16)
    return Support::constrained("hidden and G are rounded to bf16 for the tensor-core GEMMs; f32 accumulation");
  if (r.dtype == DType::kF16)
    return Support::constrained("hidden is rounded to f16 for the logits' tensor-core GEMM; f32 accumulation");
  return Support::native();
}

Status Training::token_logprobs(const TokenLogprobArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  const int64_t T = a.hidden.dim(0), V = a.lm_head.dim(0);
  KILN_RETURN_IF_ERROR(check_targets(*ctx_, a.targets, V, req));
  ProfileScope prof(ctx_->profiler.get(), [&] { return "token_logprobs " + req; });
  KILN_ASSIGN_OR_RETURN(cublasHandle_t h, ctx_->blas());
  KILN_ASSIGN_OR_RETURN(const HiddenOperand x, hidden_operand(*ctx_, a.hidden, a.lm_head.dtype(), req));
  const int64_t vc = vocab_chunk(T, V);
  KILN_ASSIGN_OR_RETURN(Tensor logits, ctx_->empty({T, vc}, DType::kF32));
  KILN_ASSIGN_OR_RETURN(Tensor state, ctx_->empty({3, T}, DType::kF32));  // max, sum, target logit
  LogprobChunkParams p;
  p.tokens = T;
  p.logits = logits.data<float>();
  p.targets = a.targets.data<int32_t>();
  p.run_max = state.data<float>();
  p.run_sum = p.run_max + T;
  p.target_logit = p.run_sum + T;
  p.lse = a.lse.data<float>();
  p.logp = a.logp.data<float>();
  for (int64_t v0 = 0; v0 < V; v0 += vc) {
    p.v0 = v0;
    p.n = std::min(vc, V - v0);
    p.first = v0 == 0;
    p.last = v0 + p.n == V;
    KILN_RETURN_IF_ERROR(chunk_logits(h, x, a.lm_head, T, v0, p.n, logits.data<float>()).with_context(req));
    KILN_RETURN_IF_ERROR(logprob_chunk_forward(p, ctx_->stream).with_context(req));
  }
  return {};
}

Status Training::token_logprobs_backward(const TokenLogprobBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  const int64_t T = a.hidden.dim(0), V = a.lm_head.dim(0);
  const DType dt = a.lm_head.dtype();
  KILN_RETURN_IF_ERROR(checked_dhidden(a.dhidden, req));
  KILN_RETURN_IF_ERROR(check_targets(*ctx_, a.targets, V, req));
  ProfileScope prof(ctx_->profiler.get(), [&] { return "token_logprobs_backward " + req; });
  KILN_ASSIGN_OR_RETURN(cublasHandle_t h, ctx_->blas());
  KILN_ASSIGN_OR_RETURN(const HiddenOperand x, hidden_operand(*ctx_, a.hidden, dt, req));
  const int64_t vc = vocab_chunk(T, V);
  KILN_ASSIGN_OR_RETURN(Tensor logits, ctx_->empty({T, vc}, DType::kF32));
  const int64_t W = a.hidden.dim(1);
  Tensor g_round;  // G in bf16 for a bf16 head; an f32 G overwrites the logits in place
  if (dt == DType::kBF16) {
    KILN_ASSIGN_OR_RETURN(g_round, ctx_->empty({T, vc}, DType::kBF16));
  }
  Tensor wide;  // an f16 head's chunk widened to f32, for the f32 G
  if (dt == DType::kF16) {
    KILN_ASSIGN_OR_RETURN(wide, ctx_->empty({vc, W}, DType::kF32));
  }
  const DType g_dt = dt == DType::kBF16 ? DType::kBF16 : DType::kF32;
  LogprobGradParams p;
  p.tokens = T;
  p.logits = logits.data<float>();
  p.targets = a.targets.data<int32_t>();
  p.lse = a.lse.data<float>();
  p.coef = a.coef.data<float>();
  p.g = g_dt == DType::kBF16 ? g_round.raw() : logits.raw();
  p.g_dtype = g_dt;
  const int64_t ld = T > 1 ? a.dhidden.stride(0) : a.dhidden.dim(1);
  for (int64_t v0 = 0; v0 < V; v0 += vc) {
    p.v0 = v0;
    p.n = std::min(vc, V - v0);
    KILN_RETURN_IF_ERROR(chunk_logits(h, x, a.lm_head, T, v0, p.n, logits.data<float>()).with_context(req));
    KILN_RETURN_IF_ERROR(logprob_chunk_grad(p, ctx_->stream).with_context(req));
    const void* rows = head_row(a.lm_head, v0);
    if (dt == DType::kF16) {
      KILN_RETURN_IF_ERROR(widen_f16(rows, wide.data<float>(), p.n * W, ctx_->stream).with_context(req));
      rows = wide.raw();
    }
    // G's rows are p.n apart: the chunk's width, not the scratch's.
    KILN_RETURN_IF_ERROR(chunk_dhidden(h, p.g, rows, g_dt, W, T, v0, p.n, a.dhidden.data<float>(), ld,
                                       a.accumulate || v0 > 0)
                             .with_context(req));
  }
  return {};
}

}  // namespace kiln::cuda
