// The gated delta rule's backward in the chunked (WY/UT) form (GdnBackwardKernel::kChunked),
// for rows starting from a zero state. Per (row, value head), chunks of 64 tokens, with the
// record of gdn_chunk_record.h (Qn, Kn, G, beta; A[t, i] = beta_t exp(G_t - G_i) k_t.k_i, i < t;
// T = (I + A)^-1; U = T beta V; Wk = T beta exp(G) K; Mq), the state S0 entering the chunk, W =
// U - Wk S0, D_t = exp(G_L - G_t) and gamma_t = exp(G_t) (G_L = G of the chunk's last position):
//   out = gamma Qn S0 + Mq W;   S_next = exp(G_L) S0 + Kn^T (D W)
// Given dout and dSn = dL/dS_next, three passes after the forward's records, states and W:
//   scan (reverse over the chunks, per (row, head, 32 columns)): dSn is kept, then
//     dW  = D (Kn dSn) + Mq^T dout
//     dS0 = exp(G_L) dSn + Qn^T (gamma dout) - Wk^T dW        (dS0 is the previous chunk's dSn)
//   grads (every (row, chunk, head) at once, all dv columns):
//     dMq = dout W^T (i <= t);  E = dMq exp(G_t - G_i);  P = dMq Mq
//     dXu = T^T dW;  dXw = T^T (-dW S0^T)                      (T^T formed by blocks of 16)
//     dA  = -(dXu U^T + dXw Wk^T) (i < t);  F = dA beta_t exp(G_t - G_i)
//     dq  = gamma (dout S0^T) + E Kn
//     dk  = D (W dSn^T) + E^T Qn + F Kn + F^T Kn + beta gamma dXw
//     dv  = beta dXu
//     dbeta_t = sum_i dA[t, i] exp(G_t - G_i) k_t.k_i + V_t.dXu_t + gamma_t K_t.dXw_t
//     dG_t (the cumulative gate; dg = its reverse cumulative sum inside the chunk) gathers
//       gamma_t Q_t.(dout S0^T)_t, rows minus columns of P and of dA A, beta_t gamma_t
//       K_t.dXw_t, -D_t dD_t with dD_t = K_t.(W dSn^T)_t, and at the last position
//       sum_t D_t dD_t + exp(G_L) <dSn, S0>.
//   The derivation was checked against finite differences of the recurrence in double precision;
//   the device code is checked against the CPU facet (tests/backend/cuda/gdn_backward_test.cc).
// dq, dk (of the normalised q, k), dg and dbeta come out per value head, for the backward's
// finish kernel (which sums the heads sharing a key head and applies the l2 norms and gates);
// dv comes out whole.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels/gdn_backward.h"
#include "core/status.h"

namespace kiln::cuda {

// Whether the chunked form takes this key head size.
bool gdn_chunked_backward_takes(int64_t dk);

// Its buffers, carved by the caller from the backward's scratch (gdn_chunked_backward_floats).
struct GdnChunkedBackwardBuffers {
  float* scratch = nullptr;     // gdn_chunked_backward_floats(p) floats
  const float* beta = nullptr;  // [tokens, v_heads]: sigmoid(b), from the backward's prep kernel
  float *dqp = nullptr, *dkp = nullptr;  // [tokens, v_heads, dk]
  float *dgp = nullptr, *dbp = nullptr;  // [tokens, v_heads]
};

// Floats of the records, chunk states and W of the forward (unless p.kept holds them), and dSn
// and dW of the scan, for p.rows rows of at most p.max_len tokens.
size_t gdn_chunked_backward_floats(const GdnBackwardParams& p);

// Floats of what the two-pass forward keeps for these rows (gdn_forward_kept), the size p.kept
// must have.
size_t gdn_chunked_backward_kept_floats(const GdnBackwardParams& p);

// Largest shared memory a block of its kernels takes (the plan checks the device holds it).
size_t gdn_chunked_backward_smem_bytes(int64_t dk);

// The forward's records and states (unless p.kept holds them), the scan, the gradient pass; dv
// is written into p.dv_out.
Status gdn_chunked_backward(const GdnBackwardParams& p, const GdnChunkedBackwardBuffers& b, cudaStream_t stream);

}  // namespace kiln::cuda
