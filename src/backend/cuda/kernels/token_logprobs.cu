#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/token_logprobs.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 256;

// A running log-sum-exp as (m, s): sum of exp(x - m) over the values seen, m their max; (-inf, 0)
// is the empty set. NaN anywhere propagates into s (and so into lse), as in the CPU reference.
__device__ __forceinline__ void lse_push(float& m, float& s, float x) {
  if (x > m) {
    s = s * expf(m - x) + 1.f;  // exp(-inf) = 0 for the first value
    m = x;
  } else if (!(x == -INFINITY)) {  // -inf adds nothing (and -inf - -inf would be NaN)
    s += expf(x - m);
  }
}

__device__ __forceinline__ void lse_merge(float& m, float& s, float m2, float s2) {
  if (m2 == -INFINITY) return;
  if (m == -INFINITY) {
    m = m2;
    s = s2;
    return;
  }
  const float M = m > m2 ? m : m2;  // NaN in either gives a NaN s below
  s = s * expf(m - M) + s2 * expf(m2 - M);
  m = M;
}

// One block per token: its row of the chunk, reduced to (m, s) and merged into the running state.
__global__ void __launch_bounds__(kThreads) logprob_chunk_forward_kernel(LogprobChunkParams p) {
  __shared__ float ms[kThreads / 32], ss[kThreads / 32];
  const int64_t t = blockIdx.x;
  const float* row = p.logits + t * p.n;
  float m = -INFINITY, s = 0.f;
  for (int64_t j = threadIdx.x; j < p.n; j += kThreads) lse_push(m, s, row[j]);
  for (int o = 16; o > 0; o >>= 1) {
    const float m2 = __shfl_xor_sync(0xffffffffu, m, o), s2 = __shfl_xor_sync(0xffffffffu, s, o);
    lse_merge(m, s, m2, s2);
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    ms[warp] = m;
    ss[warp] = s;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) lse_merge(m, s, ms[w], ss[w]);
  if (!p.first) lse_merge(m, s, p.run_max[t], p.run_sum[t]);
  const int64_t tg = p.targets[t];
  const bool here = tg >= p.v0 && tg < p.v0 + p.n;
  if (!p.last) {
    p.run_max[t] = m;
    p.run_sum[t] = s;
    if (here) p.target_logit[t] = row[tg - p.v0];
    return;
  }
  const float lse = m + logf(s);
  p.lse[t] = lse;
  if (tg < 0) {
    p.logp[t] = 0.f;
  } else {
    const float tl = here ? row[tg - p.v0] : p.target_logit[t];
    p.logp[t] = tl - lse;
  }
}

// One thread per element (grid-stride): G = c (onehot - exp(logit - lse)), c = 0 without a target.
__global__ void __launch_bounds__(kThreads) logprob_chunk_grad_kernel(LogprobGradParams p) {
  const int64_t total = p.tokens * p.n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t t = i / p.n, j = i - t * p.n;
    const int64_t tg = p.targets[t];
    const float c = tg >= 0 ? p.coef[t] : 0.f;
    float g = 0.f;  // a zero coefficient gives an exact zero (no NaN from an overflowing exp)
    if (c != 0.f) {
      g = -c * expf(p.logits[i] - p.lse[t]);
      if (tg == p.v0 + j) g += c;
    }
    if (p.g_dtype == DType::kBF16) static_cast<__nv_bfloat16*>(p.g)[i] = __float2bfloat16_rn(g);
    else static_cast<float*>(p.g)[i] = g;
  }
}

__global__ void __launch_bounds__(kThreads) widen_f16_kernel(const __half* src, float* dst, int64_t count) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * kThreads)
    dst[i] = __half2float(src[i]);
}

std::string chunk_shape(int64_t tokens, int64_t n, int64_t v0) {
  return "tokens=" + std::to_string(tokens) + " chunk=" + std::to_string(n) + " v0=" + std::to_string(v0);
}

}  // namespace

Status logprob_chunk_forward(const LogprobChunkParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.n == 0) return {};
  if (p.tokens > 0x7fffffff) return invalid_argument("logprob_chunk_forward_kernel: more than 2^31-1 tokens");
  logprob_chunk_forward_kernel<<<static_cast<unsigned>(p.tokens), kThreads, 0, stream>>>(p);
  return launch_status("logprob_chunk_forward_kernel", [&] { return chunk_shape(p.tokens, p.n, p.v0); }, stream);
}

Status logprob_chunk_grad(const LogprobGradParams& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.n == 0) return {};
  if (p.g_dtype != DType::kF32 && p.g_dtype != DType::kBF16)
    return invalid_argument("logprob_chunk_grad_kernel: G must be f32 or bf16, not " + std::string(dtype_name(p.g_dtype)));
  logprob_chunk_grad_kernel<<<grid_blocks(p.tokens * p.n, kThreads, int64_t{1} << 20), kThreads, 0, stream>>>(p);
  return launch_status("logprob_chunk_grad_kernel", [&] { return chunk_shape(p.tokens, p.n, p.v0); }, stream);
}

Status widen_f16(const void* src, float* dst, int64_t count, cudaStream_t stream) {
  if (count == 0) return {};
  widen_f16_kernel<<<grid_blocks(count, kThreads, int64_t{1} << 20), kThreads, 0, stream>>>(
      static_cast<const __half*>(src), dst, count);
  return launch_status("widen_f16_kernel", [&] { return "count=" + std::to_string(count); }, stream);
}

}  // namespace kiln::cuda
