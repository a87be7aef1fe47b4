#include "backend/cuda/kernels/gated_delta_rule.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128;

// Grid: (v_heads, rows). Each thread owns whole columns j of S, so the two passes over a column
// need no synchronisation; barriers only guard the per-token q/k/v vectors in shared memory.
// The arithmetic follows the CPU reference's order (decay, u, then update and output).
__global__ void __launch_bounds__(kThreads) gated_delta_rule_kernel(GatedDeltaRuleParams p) {
  extern __shared__ float smem[];
  const int64_t h = blockIdx.x, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots) return;
  const int64_t dk = p.dk, dv = p.dv, kh = h / (p.v_heads / p.k_heads);
  float* S = smem;             // [dk, dv]
  float* q_s = S + dk * dv;    // [dk]
  float* k_s = q_s + dk;       // [dk]
  float* v_s = k_s + dk;       // [dv]
  float* scratch = v_s + dv;   // [32]
  float* gates = scratch + 32; // decay, beta

  float* S_glob = p.state + (slot * p.v_heads + h) * dk * dv;
  for (int64_t e = threadIdx.x; e < dk * dv; e += kThreads) S[e] = S_glob[e];
  const float A = expf(p.a_log[h]);
  const float dt_bias = p.dt_bias[h];
  const float q_scale = 1.f / sqrtf(static_cast<float>(dk));

  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  for (int64_t t = t0; t < t1; ++t) {
    __syncthreads();  // the previous token's vectors are no longer read
    const float* q = p.q.at(t, kh);
    const float* k = p.k.at(t, kh);
    const float* v = p.v.at(t, h);
    float qq = 0.f, kk = 0.f;
    for (int64_t i = threadIdx.x; i < dk; i += kThreads) {
      const float qi = q[i], ki = k[i];
      q_s[i] = qi;
      k_s[i] = ki;
      qq += qi * qi;
      kk += ki * ki;
    }
    for (int64_t j = threadIdx.x; j < dv; j += kThreads) v_s[j] = v[j];
    qq = block_sum(qq, scratch);
    kk = block_sum(kk, scratch);
    const float q_inv = q_scale / sqrtf(qq + 1e-6f), k_inv = 1.f / sqrtf(kk + 1e-6f);
    if (threadIdx.x == 0) {
      const float x = p.a.row(t)[h] + dt_bias;
      const float softplus = x > 20.f ? x : log1pf(expf(x));
      gates[0] = expf(-A * softplus);
      gates[1] = 1.f / (1.f + expf(-p.b.row(t)[h]));
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < dk; i += kThreads) {
      q_s[i] *= q_inv;
      k_s[i] *= k_inv;
    }
    __syncthreads();
    const float decay = gates[0], beta = gates[1];
    float* o = p.out.at(t, h);
    for (int64_t j = threadIdx.x; j < dv; j += kThreads) {
      float u = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        const float s = S[i * dv + j] * decay;
        S[i * dv + j] = s;
        u += s * k_s[i];
      }
      u = beta * (v_s[j] - u);
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        const float s = S[i * dv + j] + k_s[i] * u;
        S[i * dv + j] = s;
        acc += s * q_s[i];
      }
      o[j] = acc;
    }
  }
  __syncthreads();
  for (int64_t e = threadIdx.x; e < dk * dv; e += kThreads) S_glob[e] = S[e];
}

}  // namespace

size_t gated_delta_rule_smem_bytes(int64_t dk, int64_t dv) {
  return static_cast<size_t>(dk * dv + 2 * dk + dv + 32 + 2) * sizeof(float);
}

Status gated_delta_rule(const GatedDeltaRuleParams& p, cudaStream_t stream) {
  auto shape = [&] { return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) +
                            " k_heads=" + std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) +
                            " dk=" + std::to_string(p.dk) + " dv=" + std::to_string(p.dv); };
  if (p.rows == 0) return {};
  if (p.rows > 65535 || p.v_heads > 0x7fffffff)
    return invalid_argument("gated_delta_rule_kernel: too many rows or heads (" + shape() + ")");
  const size_t smem = gated_delta_rule_smem_bytes(p.dk, p.dv);
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gated_delta_rule_kernel),
                                           static_cast<int64_t>(smem), "gated_delta_rule_kernel")
                           .with_context(shape()));
  dim3 grid(static_cast<unsigned>(p.v_heads), static_cast<unsigned>(p.rows));
  gated_delta_rule_kernel<<<grid, kThreads, smem, stream>>>(p);
  return launch_status("gated_delta_rule_kernel", shape, stream);
}

}  // namespace kiln::cuda
