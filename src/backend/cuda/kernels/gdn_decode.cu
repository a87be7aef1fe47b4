#include <cuda_pipeline.h>

#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

// Grid: (k_heads, rows). Threads: one per state column of the block's value heads (ratio * dv,
// rounded up to a warp, at most 1024; loops cover the rest).
__global__ void gdn_decode_kernel(GdnDecodeParams p) {
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int64_t kh = blockIdx.x, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots || slot >= p.conv_slots) return;
  const int64_t dk = p.dk, dv = p.dv, ratio = p.v_heads / p.k_heads, cols = ratio * dv;
  const int64_t K = p.conv_kernel, C = p.channels;
  const int tid = threadIdx.x, nthreads = blockDim.x, lane = tid & 31, warp = tid >> 5, nwarps = nthreads >> 5;

  const int64_t n_state = ratio * dk * dv;
  float* S = smem;              // [ratio][dk][dv]
  float* q_s = S + n_state;     // [dk]
  float* k_s = q_s + dk;        // [dk]
  float* v_s = k_s + dk;        // [cols]
  float* o_s = v_s + cols;      // [cols]
  float* gates = o_s + cols;    // [ratio][2]: decay, beta
  float* inv = gates + 2 * ratio;  // [ratio]
  float* scratch = inv + ratio;    // [32]

  // The value heads kh*ratio .. kh*ratio+ratio-1 have adjacent states: one contiguous copy,
  // in flight while the conv runs.
  float* S_glob = p.state + (slot * p.v_heads + kh * ratio) * dk * dv;
  const bool vec = (n_state % 4 == 0) && (reinterpret_cast<uintptr_t>(S_glob) % 16 == 0);
  if (vec) {
    for (int64_t e = tid; e < n_state / 4; e += nthreads) __pipeline_memcpy_async(smem4 + e, S_glob + 4 * e, 16);
    __pipeline_commit();
  } else {
    for (int64_t e = tid; e < n_state; e += nthreads) S[e] = S_glob[e];
  }

  const float q_scale = 1.f / sqrtf(static_cast<float>(dk));
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  float* cst = p.conv_state + slot * (K - 1) * C;
  for (int64_t t = t0; t < t1; ++t) {
    __syncthreads();  // the previous token's vectors are no longer read
    // Conv update of the block's channels: q, k of key head kh; v of its value heads.
    for (int64_t e = tid; e < 2 * dk + cols; e += nthreads) {
      int64_t ch;
      float* dst;
      if (e < dk) {
        ch = kh * dk + e;
        dst = q_s + e;
      } else if (e < 2 * dk) {
        ch = p.k_heads * dk + kh * dk + (e - dk);
        dst = k_s + (e - dk);
      } else {
        ch = 2 * p.k_heads * dk + kh * cols + (e - 2 * dk);
        dst = v_s + (e - 2 * dk);
      }
      const float x = p.mixed[t * p.mixed_stride + ch];
      const float* w = p.conv_weight + ch * p.conv_weight_stride;
      float acc = 0.f;
      for (int64_t k = 0; k < K - 1; ++k) {
        const float s = cst[k * C + ch];
        acc += w[k] * s;
        if (k > 0) cst[(k - 1) * C + ch] = s;  // shift the window by one
      }
      acc += w[K - 1] * x;
      cst[(K - 2) * C + ch] = x;
      *dst = acc / (1.f + expf(-acc));
    }
    __syncthreads();
    float qq = 0.f, kk = 0.f;
    for (int64_t i = tid; i < dk; i += nthreads) {
      qq += q_s[i] * q_s[i];
      kk += k_s[i] * k_s[i];
    }
    qq = block_sum(qq, scratch);
    kk = block_sum(kk, scratch);
    const float q_inv = q_scale / sqrtf(qq + 1e-6f), k_inv = 1.f / sqrtf(kk + 1e-6f);
    if (tid < ratio) {
      const int64_t h = kh * ratio + tid;
      const float x = p.a[t * p.a_stride + h] + p.dt_bias[h];
      const float softplus = x > 20.f ? x : log1pf(expf(x));
      gates[2 * tid] = expf(-expf(p.a_log[h]) * softplus);
      gates[2 * tid + 1] = 1.f / (1.f + expf(-p.b[t * p.b_stride + h]));
    }
    __syncthreads();  // every thread has read q_s, k_s for the sums
    for (int64_t i = tid; i < dk; i += nthreads) {
      q_s[i] *= q_inv;
      k_s[i] *= k_inv;
    }
    if (t == t0 && vec) __pipeline_wait_prior(0);
    __syncthreads();
    // The recurrence, a thread per state column (the CPU reference's order).
    for (int64_t c = tid; c < cols; c += nthreads) {
      const int64_t hh = c / dv, j = c % dv;
      float* Sh = S + hh * dk * dv + j;
      const float decay = gates[2 * hh], beta = gates[2 * hh + 1];
      float u = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        const float s = Sh[i * dv] * decay;
        Sh[i * dv] = s;
        u += s * k_s[i];
      }
      u = beta * (v_s[c] - u);
      float acc = 0.f;
      for (int64_t i = 0; i < dk; ++i) {
        const float s = Sh[i * dv] + k_s[i] * u;
        Sh[i * dv] = s;
        acc += s * q_s[i];
      }
      o_s[c] = acc;
    }
    __syncthreads();
    // Gated RMSNorm per value head: y = w * o * rsqrt(mean(o^2) + eps) * silu(z).
    for (int64_t hh = warp; hh < ratio; hh += nwarps) {
      float ss = 0.f;
      for (int64_t j = lane; j < dv; j += 32) ss += o_s[hh * dv + j] * o_s[hh * dv + j];
      ss = warp_sum(ss);
      if (lane == 0) inv[hh] = 1.f / sqrtf(ss / static_cast<float>(dv) + p.eps);
    }
    __syncthreads();
    for (int64_t c = tid; c < cols; c += nthreads) {
      const int64_t hh = c / dv, j = c % dv, h = kh * ratio + hh;
      const float zv = p.z[t * p.z_token_stride + h * p.z_head_stride + j];
      p.out[t * p.out_token_stride + h * p.out_head_stride + j] =
          p.norm_weight[j] * (o_s[c] * inv[hh]) * (zv / (1.f + expf(-zv)));
    }
  }
  if (t1 == t0 && vec) __pipeline_wait_prior(0);
  __syncthreads();
  if (vec) {
    for (int64_t e = tid; e < n_state / 4; e += nthreads) reinterpret_cast<float4*>(S_glob)[e] = smem4[e];
  } else {
    for (int64_t e = tid; e < n_state; e += nthreads) S_glob[e] = S[e];
  }
}

}  // namespace

size_t gdn_decode_smem_bytes(int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv) {
  if (k_heads <= 0) return 0;
  const int64_t ratio = v_heads / k_heads;
  return static_cast<size_t>(ratio * dk * dv + 2 * dk + 2 * ratio * dv + 3 * ratio + 32) * sizeof(float);
}

Status gdn_decode(const GdnDecodeParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " k_heads=" +
           std::to_string(p.k_heads) + " v_heads=" + std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) +
           " dv=" + std::to_string(p.dv) + " conv_kernel=" + std::to_string(p.conv_kernel);
  };
  if (p.rows == 0) return {};
  if (p.rows > 65535 || p.k_heads > 0x7fffffff || p.conv_kernel < 2)
    return invalid_argument("gdn_decode_kernel: bad rows, heads or conv kernel (" + shape() + ")");
  const size_t smem = gdn_decode_smem_bytes(p.k_heads, p.v_heads, p.dk, p.dv);
  static cudaError_t attr = [] {
    int dev = 0, optin = 0;
    cudaError_t e = cudaGetDevice(&dev);
    if (e == cudaSuccess) e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    if (e == cudaSuccess) e = cudaFuncSetAttribute(gdn_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin);
    return e;
  }();
  if (attr != cudaSuccess)
    return internal_error(std::string("gdn_decode_kernel: raising the shared-memory limit: ") + cudaGetErrorString(attr));
  const int64_t cols = (p.v_heads / p.k_heads) * p.dv;
  int threads = static_cast<int>(((cols + 31) / 32) * 32);
  if (threads > 1024) threads = 1024;
  if (threads < 64) threads = 64;
  dim3 grid(static_cast<unsigned>(p.k_heads), static_cast<unsigned>(p.rows));
  gdn_decode_kernel<<<grid, threads, smem, stream>>>(p);
  return launch_status("gdn_decode_kernel", shape, stream);
}

}  // namespace kiln::cuda
