// The backward of causal GQA attention with the fused output gate, over dense per-token K/V, each
// row of the layout from position 0 (the CPU reference: cpu/training_attention.cc). Row by row:
// the row's K and V are gathered into contiguous [kv_heads, n, head_dim] scratch, then per chunk
// (kernels/attention_backward.h) the probabilities are recomputed and the gradients formed by
// strided-batched cuBLAS GEMMs over the chunk's kv heads, with the row-wise steps between them as
// kernels:
//   S = scale Q K^T, P = causal softmax(S), O = P V, (gate) dO, Di = rowsum(dO O),
//   dP = dO V^T, dS = P (dP - Di) scale, dQ = dS K, dK += dS^T Q, dV += P^T dO.
// A kv head's group of query heads is one block of rows, so dK and dV sum over the group inside
// the GEMM. Everything is f32 with f32 accumulation (CUBLAS_COMPUTE_32F, no TF32), so the result
// matches the CPU to f32 rounding (the tests hold it to 2e-5 relative); a request that allows bf16
// products (AttentionBackwardArgs::compute, a bf16 checkpoint's) runs the GEMMs on TF32 tensor
// cores instead (CUBLAS_COMPUTE_32F_FAST_TF32: operands rounded to a 10-bit mantissa, f32
// accumulation), the row-wise steps unchanged. Where such a request also brings the forward's
// output and log-sum-exps (AttentionBackwardArgs::out and kept, left by flash_prefill) and its
// head_dim has an instance, it runs on bf16 tensor cores in flash form instead
// (kernels/flash_backward.h): tiles of probabilities recomputed from the log-sum-exps, nothing of
// size tokens^2 in memory.
#include <cublas_v2.h>

#include <algorithm>
#include <string>
#include <vector>

#include "backend/cuda/blas.h"
#include "backend/cuda/kernels/attention_backward.h"
#include "backend/cuda/kernels/flash_backward.h"
#include "backend/cuda/tuning.h"
#include "backend/cuda/training.h"
#include "backend/cuda/views.h"
#include "backend/training_checks.h"

namespace kiln::cuda {

namespace {

// The most floats one score buffer (P or dS) of a chunk holds: 256 MB each. A row whose scores
// exceed it is split into a few kv heads at a time, then a few query heads of a group, then
// blocks of query positions (dK and dV accumulate over the chunks).
constexpr int64_t kScoreBudget = int64_t{1} << 26;

struct ChunkPlan {
  int64_t kv_heads, q_heads, positions;  // per chunk: kv heads, query heads of each group, query positions
};

ChunkPlan plan_chunks(int64_t n, int64_t hkv, int64_t group) {
  const int64_t per_head = n * n;  // one query head's scores over the whole row (bounded by the i32 offsets)
  if (per_head <= kScoreBudget / (hkv * group)) return {hkv, group, n};
  if (per_head <= kScoreBudget / group) return {kScoreBudget / (group * per_head), group, n};
  if (per_head <= kScoreBudget) return {1, kScoreBudget / per_head, n};
  return {1, 1, std::max<int64_t>(1, kScoreBudget / n)};
}

// One operand of a row-major GEMM: `batch_stride` floats between the matrices of the batch.
struct Operand {
  const float* data;
  int64_t ld, batch_stride;
  bool trans;
};

// Row-major C[m, n] = alpha op(A) op(B) + beta C over `batch` matrices. cuBLAS is column-major and
// a row-major matrix is its column-major transpose, so it is asked for C^T = op(B)^T op(A)^T.
Status batched_gemm(cublasHandle_t h, cublasComputeType_t compute, int64_t m, int64_t n, int64_t k, float alpha,
                    Operand a, Operand b, float beta, float* c, int64_t ldc, int64_t c_stride, int64_t batch,
                    const std::string& req) {
  const cublasStatus_t s = cublasGemmStridedBatchedEx(
      h, b.trans ? CUBLAS_OP_T : CUBLAS_OP_N, a.trans ? CUBLAS_OP_T : CUBLAS_OP_N, static_cast<int>(n),
      static_cast<int>(m), static_cast<int>(k), &alpha, b.data, CUDA_R_32F, static_cast<int>(b.ld), b.batch_stride,
      a.data, CUDA_R_32F, static_cast<int>(a.ld), a.batch_stride, &beta, c, CUDA_R_32F, static_cast<int>(ldc),
      c_stride, static_cast<int>(batch), compute, CUBLAS_GEMM_DEFAULT);
  if (s == CUBLAS_STATUS_SUCCESS) return {};  // the message is built only for an error
  return blas_status(s, req + ": cuBLAS GEMM [" + std::to_string(m) + ", " + std::to_string(n) + ", " +
                            std::to_string(k) + "] x " + std::to_string(batch));
}

bool use_flash_backward(const AttentionBackwardArgs& a) {
  return tuning().flash_backward && a.compute == DType::kBF16 && a.kept.defined() &&
         flash_backward_supports(a.q.dim(2));
}

// The flash form (kernels/flash_backward.h), its scratch pool-cached and ordered on the stream.
Status flash_attention_backward(Context& ctx, const AttentionBackwardArgs& a, const std::vector<int32_t>& cu,
                                int64_t max_len, const std::string& req) {
  const int64_t T = a.q.dim(0), Hq = a.q.dim(1), Hkv = a.k.dim(1), D = a.q.dim(2);
  if (a.kept.rank() != 2 || a.kept.dim(0) != T || a.kept.dim(1) != Hq || a.kept.dtype() != DType::kF32 ||
      !a.kept.is_contiguous())
    return invalid_argument(req + ": 'kept' is " + a.kept.describe() + ", not the flash forward's [" +
                            std::to_string(T) + ", " + std::to_string(Hq) + "] log-sum-exps");
  KILN_ASSIGN_OR_RETURN(Tensor qb, ctx.empty({T, Hq, D}, DType::kBF16));
  KILN_ASSIGN_OR_RETURN(Tensor dob, ctx.empty({T, Hq, D}, DType::kBF16));
  KILN_ASSIGN_OR_RETURN(Tensor kb, ctx.empty({T, Hkv, D}, DType::kBF16));
  KILN_ASSIGN_OR_RETURN(Tensor vb, ctx.empty({T, Hkv, D}, DType::kBF16));
  KILN_ASSIGN_OR_RETURN(Tensor di, ctx.empty({T, Hq}, DType::kF32));
  // The dS tiles for a dQ pass of one GEMM, where they fit the tuning's budget.
  const int64_t ds_bytes = flash_backward_ds_bytes(cu.data(), a.layout->rows, Hq);
  Tensor ds;
  if (ds_bytes <= tuning().flash_backward_ds_mb * (int64_t{1} << 20)) {
    KILN_ASSIGN_OR_RETURN(ds, ctx.empty({ds_bytes / 2}, DType::kBF16));
  }
  FlashBackwardParams f;
  f.rows = a.layout->rows;
  f.tokens = T;
  f.max_len = max_len;
  f.q_heads = Hq;
  f.kv_heads = Hkv;
  f.head_dim = D;
  f.cu_seqlens = a.layout->cu_seqlens.data<int32_t>();
  f.q = heads_of<const float>(a.q);
  f.k = heads_of<const float>(a.k);
  f.v = heads_of<const float>(a.v);
  f.out = heads_of<const float>(a.out);
  f.dout = heads_of<const float>(a.dout);
  f.dq = heads_of<float>(a.dq);
  f.dk = heads_of<float>(a.dk);
  f.dv = heads_of<float>(a.dv);
  if (a.gate.defined()) {
    f.gate = heads_of<const float>(a.gate);
    f.dgate = heads_of<float>(a.dgate);
  }
  f.lse = a.kept.data<float>();
  f.qb = qb.raw();
  f.dob = dob.raw();
  f.kb = kb.raw();
  f.vb = vb.raw();
  f.di = di.data<float>();
  if (ds.defined()) f.ds = ds.raw();
  f.scale = a.scale;
  return flash_backward(f, ctx.stream).with_context(req);
}

}  // namespace

Support Training::supports_attention(const TrainRequest& r) {
  if (r.dtype != DType::kF32) return Support::declined("activations must be f32");
  if (r.rows <= 0 || r.tokens <= 0 || r.q_heads <= 0 || r.kv_heads <= 0 || r.head_dim <= 0)
    return Support::declined("sizes must be positive");
  if (r.q_heads % r.kv_heads != 0) return Support::declined("q_heads must be a multiple of kv_heads");
  return Support::native();
}

Status Training::attention_backward(const AttentionBackwardArgs& a) {
  KILN_ASSIGN_OR_RETURN(const std::string req, open_train_call(*this, a, "cuda", DeviceKind::kCuda));
  const int64_t R = a.layout->rows, T = a.q.dim(0), Hkv = a.k.dim(1), D = a.q.dim(2);
  const int64_t group = a.q.dim(1) / Hkv;
  cudaStream_t st = ctx_->stream;
  if (!a.layout->cu_seqlens.is_contiguous()) return invalid_argument(req + ": cu_seqlens must be contiguous");
  ProfileScope prof(ctx_->profiler.get(), [&] {
    return "attention_backward tokens=" + std::to_string(T) + (a.compute == DType::kBF16 ? " (tf32)" : "");
  });

  // The row offsets on the host: the chunking and the GEMM shapes follow them. The layout's host
  // copy where it has one; otherwise read back, which waits for every kernel queued before it
  // (a training step's queue drained eight times a step on the 4B shape, before the copy).
  std::vector<int32_t> cu = a.layout->host_cu_seqlens;
  if (static_cast<int64_t>(cu.size()) != R + 1) {
    cu.assign(static_cast<size_t>(R + 1), 0);
    KILN_RETURN_IF_ERROR(cuda_status(cudaMemcpyAsync(cu.data(), a.layout->cu_seqlens.data<int32_t>(),
                                                     cu.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, st),
                                     req + ": reading cu_seqlens"));
    KILN_RETURN_IF_ERROR(ctx_->synchronize(req + ": reading cu_seqlens"));
  }
  int64_t kv_elems = 0, chunk_rows = 0, score_elems = 0, max_len = 0;
  for (int64_t r = 0; r < R; ++r) {
    if (cu[r] < 0 || cu[r + 1] < cu[r] || cu[r + 1] > T)
      return invalid_argument(req + ": row " + std::to_string(r) + " of cu_seqlens is outside the tokens");
    const int64_t n = cu[r + 1] - cu[r];
    max_len = std::max(max_len, n);
    if (n == 0) continue;
    const ChunkPlan c = plan_chunks(n, Hkv, group);
    kv_elems = std::max(kv_elems, Hkv * n * D);
    chunk_rows = std::max(chunk_rows, c.kv_heads * c.q_heads * c.positions);
    score_elems = std::max(score_elems, c.kv_heads * c.q_heads * c.positions * n);
  }
  if (chunk_rows == 0) return {};  // every row empty: no gradient to write
  if (use_flash_backward(a)) return flash_attention_backward(*ctx_, a, cu, max_len, req);
  KILN_ASSIGN_OR_RETURN(cublasHandle_t h, ctx_->blas());
  const cublasComputeType_t compute = a.compute == DType::kBF16 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;

  // Scratch, pool-cached and ordered on the stream like every kernel here.
  auto scratch = [&](int64_t n) { return ctx_->empty(Shape{n}, DType::kF32); };
  KILN_ASSIGN_OR_RETURN(Tensor ks_t, scratch(kv_elems));
  KILN_ASSIGN_OR_RETURN(Tensor vs_t, scratch(kv_elems));
  KILN_ASSIGN_OR_RETURN(Tensor dks_t, scratch(kv_elems));
  KILN_ASSIGN_OR_RETURN(Tensor dvs_t, scratch(kv_elems));
  KILN_ASSIGN_OR_RETURN(Tensor qs_t, scratch(chunk_rows * D));
  KILN_ASSIGN_OR_RETURN(Tensor dos_t, scratch(chunk_rows * D));
  KILN_ASSIGN_OR_RETURN(Tensor os_t, scratch(chunk_rows * D));
  KILN_ASSIGN_OR_RETURN(Tensor di_t, scratch(chunk_rows));
  KILN_ASSIGN_OR_RETURN(Tensor p_t, scratch(score_elems));
  KILN_ASSIGN_OR_RETURN(Tensor ds_t, scratch(score_elems));
  float *ks = ks_t.data<float>(), *vs = vs_t.data<float>(), *dks = dks_t.data<float>(), *dvs = dvs_t.data<float>();
  float *qs = qs_t.data<float>(), *dos = dos_t.data<float>(), *os = os_t.data<float>();

  for (int64_t r = 0; r < R; ++r) {
    const int64_t b = cu[r], n = cu[r + 1] - cu[r];
    if (n == 0) continue;
    const AttnRowMap kv_map{b, 0, n, 0, 1, 0, 1};  // the row's [kv_heads, n] in order
    KILN_RETURN_IF_ERROR(attention_gather(heads_of<float>(a.k), kv_map, Hkv * n, D, ks, st));
    KILN_RETURN_IF_ERROR(attention_gather(heads_of<float>(a.v), kv_map, Hkv * n, D, vs, st));
    const size_t kv_bytes = static_cast<size_t>(Hkv * n * D) * sizeof(float);
    KILN_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(dks, 0, kv_bytes, st), req + ": zeroing dk"));
    KILN_RETURN_IF_ERROR(cuda_status(cudaMemsetAsync(dvs, 0, kv_bytes, st), req + ": zeroing dv"));
    const ChunkPlan plan = plan_chunks(n, Hkv, group);
    for (int64_t t0 = 0; t0 < n; t0 += plan.positions) {
      const int64_t tq = std::min(plan.positions, n - t0), keys = t0 + tq;
      for (int64_t j0 = 0; j0 < Hkv; j0 += plan.kv_heads) {
        const int64_t hb = std::min(plan.kv_heads, Hkv - j0);
        for (int64_t i0 = 0; i0 < group; i0 += plan.q_heads) {
          const int64_t gi = std::min(plan.q_heads, group - i0), M = gi * tq;  // score rows per kv head
          AttnChunkParams c;
          c.map = {b, t0, tq, j0, group, i0, gi};
          c.rows = hb * M;
          c.keys = keys;
          c.head_dim = D;
          c.scale = a.scale;
          c.p = p_t.data<float>();
          c.ds = ds_t.data<float>();
          c.o = os;
          c.dout = dos;
          c.di = di_t.data<float>();
          c.gate = heads_of<float>(a.gate);
          c.dgate = heads_of<float>(a.dgate);
          KILN_RETURN_IF_ERROR(attention_gather(heads_of<float>(a.q), c.map, c.rows, D, qs, st));
          KILN_RETURN_IF_ERROR(attention_gather(heads_of<float>(a.dout), c.map, c.rows, D, dos, st));
          // This chunk's kv heads in the row's K/V scratch, and their gradients (the first `keys` rows).
          const int64_t off = j0 * n * D, kv_stride = n * D, s_stride = M * keys, r_stride = M * D;
          const Operand q_op{qs, D, r_stride, false}, do_op{dos, D, r_stride, false};
          const Operand k_op{ks + off, D, kv_stride, false}, v_op{vs + off, D, kv_stride, false};
          const Operand k_t{ks + off, D, kv_stride, true}, v_t{vs + off, D, kv_stride, true};
          const Operand p_op{c.p, keys, s_stride, false}, ds_op{c.ds, keys, s_stride, false};
          const Operand p_tr{c.p, keys, s_stride, true}, ds_tr{c.ds, keys, s_stride, true};
          // Every product of the chunk: its hb kv heads as the batch.
          auto gemm = [&](int64_t m, int64_t n, int64_t k, float alpha, Operand x, Operand y, float beta, float* out,
                          int64_t ldo, int64_t out_stride) {
            return batched_gemm(h, compute, m, n, k, alpha, x, y, beta, out, ldo, out_stride, hb, req);
          };
          KILN_RETURN_IF_ERROR(gemm(M, keys, D, a.scale, q_op, k_t, 0.f, c.p, keys, s_stride));
          KILN_RETURN_IF_ERROR(attention_causal_softmax(c, st));
          KILN_RETURN_IF_ERROR(gemm(M, D, keys, 1.f, p_op, v_op, 0.f, os, D, r_stride));
          KILN_RETURN_IF_ERROR(attention_output_grad(c, st));
          KILN_RETURN_IF_ERROR(gemm(M, keys, D, 1.f, do_op, v_t, 0.f, c.ds, keys, s_stride));
          KILN_RETURN_IF_ERROR(attention_score_grad(c, st));
          // dQ lands in the O scratch (O is spent), then goes to its heads of dq.
          KILN_RETURN_IF_ERROR(gemm(M, D, keys, 1.f, ds_op, k_op, 0.f, os, D, r_stride));
          KILN_RETURN_IF_ERROR(attention_scatter(os, c.map, c.rows, D, heads_of<float>(a.dq), st));
          KILN_RETURN_IF_ERROR(gemm(keys, D, M, 1.f, ds_tr, q_op, 1.f, dks + off, D, kv_stride));
          KILN_RETURN_IF_ERROR(gemm(keys, D, M, 1.f, p_tr, do_op, 1.f, dvs + off, D, kv_stride));
        }
      }
    }
    KILN_RETURN_IF_ERROR(attention_scatter(dks, kv_map, Hkv * n, D, heads_of<float>(a.dk), st));
    KILN_RETURN_IF_ERROR(attention_scatter(dvs, kv_map, Hkv * n, D, heads_of<float>(a.dv), st));
  }
  return {};
}

}  // namespace kiln::cuda
