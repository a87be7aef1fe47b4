#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

namespace cg = cooperative_groups;

// Grid: (k_heads, rows). Threads: one per state column of the block's value heads (ratio * dv,
// rounded up to a warp, at most 1024; loops cover the rest).
__global__ void gdn_decode_kernel(GdnDecodeParams p) {
  pdl_begin();
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

// ---- the split form: two kernels, a block per (row, value head) for the state ----

// Grid: (k_heads, rows). Threads: one per q and k channel of the key head (2 * dk, rounded up to a
// warp). The conv update of those channels (this block owns them), silu, and the l2 norms; writes
// q * q_scale / |q| and k / |k| to qk [rows, k_heads, 2, dk].
__global__ void gdn_decode_qk_kernel(GdnDecodeParams p, float* qk) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t kh = blockIdx.x, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots || slot >= p.conv_slots) return;
  const int64_t dk = p.dk, K = p.conv_kernel, C = p.channels, e = threadIdx.x;
  const int64_t t = p.cu_seqlens[row];
  float val = 0.f;
  if (e < 2 * dk) {
    const int64_t ch = e < dk ? kh * dk + e : p.k_heads * dk + kh * dk + (e - dk);
    float* cst = p.conv_state + slot * (K - 1) * C;
    const float x = p.mixed[t * p.mixed_stride + ch];
    const float* w = p.conv_weight + ch * p.conv_weight_stride;
    float acc = 0.f;
    for (int64_t k = 0; k < K - 1; ++k) {
      const float s = cst[k * C + ch];
      acc += w[k] * s;
      if (k > 0) cst[(k - 1) * C + ch] = s;
    }
    acc += w[K - 1] * x;
    cst[(K - 2) * C + ch] = x;
    val = acc / (1.f + expf(-acc));
  }
  const float qq = block_sum(e < dk ? val * val : 0.f, scratch);
  const float kk = block_sum(e >= dk && e < 2 * dk ? val * val : 0.f, scratch);
  if (e < dk) qk[(row * p.k_heads + kh) * 2 * dk + e] = val * (1.f / sqrtf(static_cast<float>(dk))) / sqrtf(qq + 1e-6f);
  else if (e < 2 * dk) qk[(row * p.k_heads + kh) * 2 * dk + e] = val / sqrtf(kk + 1e-6f);
}

constexpr int kStateParts = 4;  // threads per state column, each holding dk / 4 of its entries

// Grid: (v_heads * col_splits, rows), clusters of col_splits blocks along x: block (h, c) of a
// cluster owns value columns c*cols .. c*cols+cols-1 of head h's state (cols = dv / col_splits;
// smaller blocks, more of them an SM, so that one block's loads overlap another's arithmetic).
// Threads: kStateParts per column (4 * cols). Thread (part, j) keeps rows part*RPT ..
// part*RPT+RPT-1 of its column (loaded coalesced: a warp reads 32 adjacent columns of one state
// row); the column's two dot products are summed over the parts through shared memory in a fixed
// order. The v channels' conv update (this block owns them), the gates and the gated RMSNorm run
// here too; the norm's sum of squares over the head's dv outputs adds the cluster's block sums
// in rank order through distributed shared memory, so every block of the head scales by the
// same bits.
// kStaged: the columns' state is copied into shared memory instead (cp.async, 16 bytes a copy,
// no register held across the loads), and each pass reads it there: more blocks fit an SM. The
// same arithmetic in the same order, so the same bits.
template <int RPT, bool kStaged>
__global__ void __launch_bounds__(512, kStaged ? 3 : 2) gdn_decode_state_kernel(GdnDecodeParams p, const float* qk,
                                                                               int col_splits) {
  extern __shared__ float4 smem4[];
  const int h = blockIdx.x / col_splits, split = blockIdx.x % col_splits, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  // Every block of a cluster takes the same branch (one row), so none waits at a cluster barrier
  // for a block that left.
  if (slot < 0 || slot >= p.slots || slot >= p.conv_slots) return;
  // 32-bit indices inside the block (a head's state is far below 2^31 entries): registers are
  // what limits this kernel's blocks an SM.
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv), cols = dv / col_splits, j0 = split * cols;
  const int kh = h / static_cast<int>(p.v_heads / p.k_heads);
  const int tid = threadIdx.x, part = tid / cols, j = tid - part * cols, jj = j0 + j;
  float* S_s = reinterpret_cast<float*>(smem4);  // kStaged: [dk][cols], the block's columns
  float* q_s = S_s + (kStaged ? dk * cols : 0);  // [dk]
  float* k_s = q_s + dk;                  // [dk]
  float* v_s = k_s + dk;                  // [cols]
  float* red = v_s + cols;                // [kStateParts][cols]
  float* gates = red + kStateParts * cols;  // decay, beta
  float* scratch = gates + 2;             // [32]
  float* block_ss = scratch + 32;         // this block's sum of squares, for the cluster
  const int64_t t = p.cu_seqlens[row];

  // The state loads first: in flight while the predecessor finishes and the conv and the gates run.
  // They may start before pdl_begin: the state and the slot indices were last written at least two
  // kernels back (this layer's state by the previous step; the slots by a copy before the step),
  // and a kernel starts only once the one two back has completed (kernels/pdl.cuh).
  float* S_head = p.state + (slot * p.v_heads + h) * p.dk * p.dv;
  float* S_glob = S_head + part * RPT * dv + jj;
  float s[RPT];
  if constexpr (kStaged) {
    // Each thread copies the same 16-byte column quad of rows i, i + step, ... (blockDim.x is
    // 4 * cols: step = 16 rows).
    const int quads = cols / 4, step = blockDim.x / quads, c4 = tid % quads;
    const float* src = S_head + j0 + 4 * c4;
    for (int i = tid / quads; i < dk; i += step) __pipeline_memcpy_async(S_s + i * cols + 4 * c4, src + i * dv, 16);
    __pipeline_commit();
  } else {
#pragma unroll
    for (int r = 0; r < RPT; ++r) s[r] = S_glob[r * dv];
  }
  pdl_begin();

  const float* qk_row = qk + (static_cast<int64_t>(row) * p.k_heads + kh) * 2 * dk;
  for (int e = tid; e < 2 * dk; e += blockDim.x) q_s[e] = qk_row[e];  // q then k, adjacent
  if (tid < cols) {
    const int64_t K = p.conv_kernel, C = p.channels;
    const int64_t ch = 2 * p.k_heads * p.dk + static_cast<int64_t>(h) * dv + jj;
    float* cst = p.conv_state + slot * (K - 1) * C;
    const float x = p.mixed[t * p.mixed_stride + ch];
    const float* w = p.conv_weight + ch * p.conv_weight_stride;
    float acc = 0.f;
    for (int64_t k = 0; k < K - 1; ++k) {
      const float c = cst[k * C + ch];
      acc += w[k] * c;
      if (k > 0) cst[(k - 1) * C + ch] = c;
    }
    acc += w[K - 1] * x;
    cst[(K - 2) * C + ch] = x;
    v_s[j] = acc / (1.f + expf(-acc));
  }
  if (tid == 0) {
    const float x = p.a[t * p.a_stride + h] + p.dt_bias[h];
    const float softplus = x > 20.f ? x : log1pf(expf(x));
    gates[0] = expf(-expf(p.a_log[h]) * softplus);
    gates[1] = 1.f / (1.f + expf(-p.b[t * p.b_stride + h]));
  }
  if constexpr (kStaged) __pipeline_wait_prior(0);
  __syncthreads();
  const float decay = gates[0], beta = gates[1];
  const int base = part * RPT;
  const float* S_col = S_s + base * cols + j;  // kStaged: this thread's rows of its column
  float u = 0.f;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    if constexpr (kStaged) s[0] = S_col[r * cols] * decay;
    else s[r] *= decay;
    u += s[kStaged ? 0 : r] * k_s[base + r];
  }
  red[tid] = u;  // = red[part * cols + j]
  __syncthreads();
  float ku = 0.f;
#pragma unroll
  for (int q = 0; q < kStateParts; ++q) ku += red[q * cols + j];
  u = beta * (v_s[j] - ku);
  float acc = 0.f;
#pragma unroll
  for (int r = 0; r < RPT; ++r) {
    const int i = kStaged ? 0 : r;
    if constexpr (kStaged) s[0] = S_col[r * cols] * decay;
    s[i] += k_s[base + r] * u;
    acc += s[i] * q_s[base + r];
    S_glob[r * dv] = s[i];
  }
  __syncthreads();  // every thread has read red
  red[tid] = acc;
  __syncthreads();
  float o = 0.f;
  if (part == 0)
    for (int q = 0; q < kStateParts; ++q) o += red[q * cols + j];
  float ss = block_sum(part == 0 ? o * o : 0.f, scratch);
  if (col_splits > 1) {
    cg::cluster_group cluster = cg::this_cluster();
    if (tid == 0) *block_ss = ss;
    cluster.sync();
    ss = 0.f;
    for (int c = 0; c < col_splits; ++c) ss += *cluster.map_shared_rank(block_ss, c);
    cluster.sync();  // no block leaves while another reads its sum
  }
  if (part == 0) {
    const float inv = 1.f / sqrtf(ss / static_cast<float>(dv) + p.eps);
    const float zv = p.z[t * p.z_token_stride + h * p.z_head_stride + jj];
    p.out[t * p.out_token_stride + h * p.out_head_stride + jj] = p.norm_weight[jj] * (o * inv) * (zv / (1.f + expf(-zv)));
  }
}

// The state kernel's shared memory: q, k, the block's v, the part sums, gates, scratch and the
// cluster's sum slot, plus (staged) the block's columns of the state.
size_t gdn_decode_state_smem_bytes(int64_t dk, int64_t dv, int splits, bool staged) {
  const int64_t cols = dv / splits;
  return static_cast<size_t>(2 * dk + cols + kStateParts * cols + 2 + 32 + 1 + (staged ? dk * cols : 0)) * sizeof(float);
}

}  // namespace

bool gdn_decode_split_applies(int64_t dk, int64_t dv) {
  return (dk == 16 || dk == 32 || dk == 64 || dk == 128) && dv >= 8 && dv % 8 == 0 && kStateParts * dv <= 512;
}

template <int RPT, bool kStaged>
void launch_state(const GdnDecodeParams& p, float* qk, int splits, size_t smem, cudaStream_t stream) {
  if constexpr (kStaged) {
    // The largest block this form launches (one column split: the whole head), set once.
    static const cudaError_t attr = cudaFuncSetAttribute(
        gdn_decode_state_kernel<RPT, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
        static_cast<int>(gdn_decode_state_smem_bytes(p.dk, p.dv, 1, true)));
    (void)attr;  // a failure surfaces as the launch's error
  }
  const dim3 grid(static_cast<unsigned>(p.v_heads * splits), static_cast<unsigned>(p.rows));
  const int threads = static_cast<int>(kStateParts * p.dv / splits);
  launch_pdl_cluster(gdn_decode_state_kernel<RPT, kStaged>, grid, threads, smem, stream, static_cast<unsigned>(splits),
                     p, qk, splits);
}

template <bool kStaged>
void launch_state_dk(const GdnDecodeParams& p, float* qk, int splits, size_t smem, cudaStream_t stream) {
  switch (p.dk) {
    case 16: launch_state<4, kStaged>(p, qk, splits, smem, stream); break;
    case 32: launch_state<8, kStaged>(p, qk, splits, smem, stream); break;
    case 64: launch_state<16, kStaged>(p, qk, splits, smem, stream); break;
    default: launch_state<32, kStaged>(p, qk, splits, smem, stream); break;
  }
}

Status gdn_decode_split(const GdnDecodeParams& p, float* qk, cudaStream_t stream, bool staged, int col_splits) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " v_heads=" +
           std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) + " dv=" + std::to_string(p.dv);
  };
  if (p.rows == 0) return {};
  if (p.tokens != p.rows || !gdn_decode_split_applies(p.dk, p.dv) || p.rows > 65535 || p.conv_kernel < 2)
    return invalid_argument("gdn_decode_split: needs one token a row, dk in 16..128 and dv <= 128 (" + shape() + ")");
  int qk_threads = static_cast<int>(((2 * p.dk + 31) / 32) * 32);
  launch_pdl(gdn_decode_qk_kernel, dim3(static_cast<unsigned>(p.k_heads), static_cast<unsigned>(p.rows)), qk_threads, 0, stream, p, qk);
  KILN_RETURN_IF_ERROR(launch_status("gdn_decode_qk_kernel", shape, stream));
  // Two blocks a head where the halves keep whole warps and 16-byte copies (dv % 64 == 0).
  const int splits = col_splits > 1 && p.dv % (32 * col_splits) == 0 ? col_splits : 1;
  // The staged form copies 16 bytes at a time: the state must start 16-byte aligned (each head's
  // dk * dv floats are a multiple of 4: dv % 8 == 0 above).
  if (staged && reinterpret_cast<uintptr_t>(p.state) % 16 == 0) {
    launch_state_dk<true>(p, qk, splits, gdn_decode_state_smem_bytes(p.dk, p.dv, splits, true), stream);
    return launch_status("gdn_decode_state_kernel (staged)", shape, stream);
  }
  launch_state_dk<false>(p, qk, splits, gdn_decode_state_smem_bytes(p.dk, p.dv, splits, false), stream);
  return launch_status("gdn_decode_state_kernel", shape, stream);
}

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
  launch_pdl(gdn_decode_kernel, grid, threads, smem, stream, p);
  return launch_status("gdn_decode_kernel", shape, stream);
}

}  // namespace kiln::cuda
