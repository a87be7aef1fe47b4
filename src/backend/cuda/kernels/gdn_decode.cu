#include <cuda_pipeline.h>

#include <algorithm>
#include <string>

#include "backend/cuda/kernels/gdn_decode.h"
#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/occupancy.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

// Whether a row's state slot names a slot of both states (else the row is skipped).
__device__ __forceinline__ bool live_slot(const GdnDecodeParams& p, int64_t slot) {
  return slot >= 0 && slot < p.slots && slot < p.conv_slots;
}

// One token's conv update of channel ch: silu(sum_k w[k] s_k + w[K - 1] x) over the K - 1 taps s_k
// kept in the row's conv state `cst`, which then shifts by one and takes x. Every tap and weight
// is loaded before the first store; against a loop that loads each tap after the previous shift
// this measured the same (docs/decisions.md, "The split GDN decode state: staged, persistent, two stages").
constexpr int kMaxTaps = 7;  // conv_kernel <= 8 (the facet's limit)

__device__ __forceinline__ float conv_step(const GdnDecodeParams& p, float* cst, int64_t ch, float x) {
  const int64_t K = p.conv_kernel, C = p.channels;
  const float* w = p.conv_weight.row(ch);
  float s[kMaxTaps], wk[kMaxTaps];
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) {
    s[k] = k < K - 1 ? cst[k * C + ch] : 0.f;
    wk[k] = k < K - 1 ? w[k] : 0.f;
  }
  const float w_last = w[K - 1];
  float acc = 0.f;
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k)
    if (k < K - 1) acc += wk[k] * s[k];
  acc += w_last * x;
#pragma unroll
  for (int k = 1; k < kMaxTaps; ++k)
    if (k < K - 1) cst[(k - 1) * C + ch] = s[k];  // shift the window by one
  cst[(K - 2) * C + ch] = x;
  return acc / (1.f + expf(-acc));
}

// Grid: (k_heads, rows). Threads: one per state column of the block's value heads (ratio * dv,
// rounded up to a warp, at most 1024; loops cover the rest).
__global__ void gdn_decode_kernel(GdnDecodeParams p) {
  pdl_begin();
  extern __shared__ float4 smem4[];
  float* smem = reinterpret_cast<float*>(smem4);
  const int64_t kh = blockIdx.x, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  if (!live_slot(p, slot)) return;
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
      *dst = conv_step(p, cst, ch, p.mixed.row(t)[ch]);
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
      const float x = p.a.row(t)[h] + p.dt_bias[h];
      const float softplus = x > 20.f ? x : log1pf(expf(x));
      gates[2 * tid] = expf(-expf(p.a_log[h]) * softplus);
      gates[2 * tid + 1] = 1.f / (1.f + expf(-p.b.row(t)[h]));
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
      const float zv = p.z.at(t, h)[j];
      p.out.at(t, h)[j] =
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

// ---- the split form: a vectors kernel per (row, key head), then a persistent state kernel ----

// Floats of one (row, key head) record of the vectors scratch: q, k, the value heads' v, then
// (decay, beta) per value head.
__host__ __device__ inline int64_t record_floats(int64_t dk, int64_t dv, int64_t ratio) { return 2 * dk + ratio * (dv + 2); }

// Grid: (k_heads, rows). Threads: one per channel of the key head (2 * dk + ratio * dv, rounded up
// to a warp, at most 1024; past that a thread takes every blockDim.x-th v channel). The conv update
// of those channels (this block owns them) and silu, the l2 norms of q and k, and the gates of the
// key head's value heads. Writes q * q_scale / |q|, k / |k|, v and the gates to the block's record.
__global__ void gdn_decode_vectors_kernel(GdnDecodeParams p, float* vec) {
  pdl_begin();
  __shared__ float scratch[32];
  const int64_t kh = blockIdx.x, row = blockIdx.y;
  const int64_t slot = p.state_slots[row];
  if (!live_slot(p, slot)) return;
  const int64_t dk = p.dk, dv = p.dv, ratio = p.v_heads / p.k_heads, K = p.conv_kernel, C = p.channels;
  const int64_t t = p.cu_seqlens[row], channels = 2 * dk + ratio * dv;
  float* rec = vec + (row * p.k_heads + kh) * record_floats(dk, dv, ratio);
  float* cst = p.conv_state + slot * (K - 1) * C;
  // The gates' inputs, loaded before the conv (measured no faster than after it: docs/decisions.md).
  const int64_t gh = kh * ratio + threadIdx.x;  // value head of thread e < ratio
  float ga = 0.f, gb = 0.f, ga_log = 0.f;
  if (threadIdx.x < ratio) {
    ga = p.a.row(t)[gh] + p.dt_bias[gh];
    gb = p.b.row(t)[gh];
    ga_log = p.a_log[gh];
  }
  float qk = 0.f;  // this thread's q or k channel (blockDim.x >= 2 * dk: they are all in the first pass)
  for (int64_t e = threadIdx.x; e < channels; e += blockDim.x) {
    const int64_t ch = e < dk       ? kh * dk + e
                       : e < 2 * dk ? p.k_heads * dk + kh * dk + (e - dk)
                                    : 2 * p.k_heads * dk + kh * ratio * dv + (e - 2 * dk);
    const float val = conv_step(p, cst, ch, p.mixed.row(t)[ch]);
    if (e < 2 * dk) qk = val;
    else rec[e] = val;
  }
  const int64_t e = threadIdx.x;
  const float qq = block_sum(e < dk ? qk * qk : 0.f, scratch);
  const float kk = block_sum(e >= dk && e < 2 * dk ? qk * qk : 0.f, scratch);
  if (e < dk) rec[e] = qk * (1.f / sqrtf(static_cast<float>(dk))) / sqrtf(qq + 1e-6f);
  else if (e < 2 * dk) rec[e] = qk / sqrtf(kk + 1e-6f);
  if (e < ratio) {
    const float softplus = ga > 20.f ? ga : log1pf(expf(ga));
    float* g = rec + 2 * dk + ratio * dv + 2 * e;
    g[0] = expf(-expf(ga_log) * softplus);
    g[1] = 1.f / (1.f + expf(-gb));
  }
}

constexpr int kStateParts = 4;       // threads per state column, each taking dk / 4 of its entries
constexpr int kMaxBlockItems = 256;  // (row, value head) items a state block takes at most

// An item's vectors, in the order the state kernel keeps them in shared memory: q, k, v, decay,
// beta, z. Element e's source.
__device__ __forceinline__ const float* item_vector(const GdnDecodeParams& p, const float* rec, int64_t t, int h,
                                                    int hh, int e) {
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv), ratio = static_cast<int>(p.v_heads / p.k_heads);
  if (e < 2 * dk) return rec + e;
  if (e < 2 * dk + dv) return rec + 2 * dk + hh * dv + (e - 2 * dk);
  if (e < 2 * dk + dv + 2) return rec + 2 * dk + ratio * dv + 2 * hh + (e - 2 * dk - dv);
  return p.z.at(t, h) + (e - 2 * dk - dv - 2);
}

// Grid: persistent, at most the blocks resident at once. Block b takes the items (row, value head)
// b, b + gridDim.x, ... (item = row * v_heads + head), at most kMaxBlockItems. Threads:
// kStateParts per state column (4 * dv). An item's state (dk x dv f32, contiguous) is copied into
// one of kStages shared-memory stages with cp.async, kStages items ahead, so the copies of the
// next items are in flight while this one is computed; its vectors (q, k, v, gates from the
// vectors kernel's record, and z) are loaded into registers an item ahead. Thread (part, j) takes
// rows part*RPT .. part*RPT+RPT-1 of column j: the decay and u = S^T k, the column's dot products
// summed over the parts through shared memory in a fixed order, then the rank-one update, written
// to the state in global memory as it goes, and o = S^T q; the gated RMSNorm of the head's dv
// outputs last.
template <int RPT, int kStages>
__global__ void __launch_bounds__(512, kStages == 1 ? 3 : 1) gdn_decode_state_kernel(GdnDecodeParams p,
                                                                                    const float* vec) {
  extern __shared__ float4 smem4[];
  // 32-bit indices inside the block (a head's state is far below 2^31 entries).
  const int dk = static_cast<int>(p.dk), dv = static_cast<int>(p.dv), head = dk * dv;
  const int ratio = static_cast<int>(p.v_heads / p.k_heads), v_heads = static_cast<int>(p.v_heads);
  const int tid = threadIdx.x, part = tid / dv, j = tid - part * dv, base = part * RPT;
  const int n_vec = 2 * dk + 2 * dv + 2;  // q, k, v, decay and beta, z: at most 2 a thread
  float* stages = reinterpret_cast<float*>(smem4);  // [kStages][dk][dv]
  float* q_s = stages + kStages * head;             // [dk]
  float* k_s = q_s + dk;                            // [dk]
  float* v_s = k_s + dk;                            // [dv]
  float* gates = v_s + dv;                          // decay, beta
  float* z_s = gates + 2;                           // [dv]
  float* red = z_s + dv;                            // [kStateParts][dv]
  float* scratch = red + kStateParts * dv;          // [32]
  int* item_slot = reinterpret_cast<int*>(scratch + 32);  // [kMaxBlockItems]; -1: skip the row
  int* item_token = item_slot + kMaxBlockItems;           // [kMaxBlockItems]
  const int64_t n_items = p.rows * p.v_heads;
  const int count = static_cast<int>((n_items - blockIdx.x + gridDim.x - 1) / gridDim.x);
  auto item_of = [&](int n) { return blockIdx.x + static_cast<int64_t>(n) * gridDim.x; };

  // Everything read before pdl_begin was last written two or more kernels back (kernels/pdl.cuh):
  // the slots and token offsets by copies before the step, a layer's state by the previous step.
  for (int n = tid; n < count; n += blockDim.x) {
    const int64_t row = item_of(n) / v_heads, slot = p.state_slots[row];
    item_slot[n] = live_slot(p, slot) ? static_cast<int>(slot) : -1;
    item_token[n] = p.cu_seqlens[row];
  }
  __syncthreads();
  auto issue = [&](int n) {  // item n's state into stage n % kStages; a group, empty past the end
    if (n < count && item_slot[n] >= 0) {
      const int h = static_cast<int>(item_of(n) % v_heads);
      const float* src = p.state + (static_cast<int64_t>(item_slot[n]) * v_heads + h) * head;
      float* dst = stages + (n % kStages) * head;
      for (int e = tid; e < head / 4; e += blockDim.x) __pipeline_memcpy_async(dst + 4 * e, src + 4 * e, 16);
    }
    __pipeline_commit();
  };
  for (int n = 0; n < kStages; ++n) issue(n);
  pdl_begin();

  float vec_next[2];
  auto load_vectors = [&](int n) {
    const int64_t item = item_of(n), row = item / v_heads;
    const int h = static_cast<int>(item % v_heads), kh = h / ratio;
    const float* rec = vec + (row * p.k_heads + kh) * record_floats(dk, dv, ratio);
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + i * static_cast<int>(blockDim.x);
      if (e < n_vec) vec_next[i] = *item_vector(p, rec, item_token[n], h, h - kh * ratio, e);
    }
  };
  load_vectors(0);
  for (int n = 0; n < count; ++n) {
    const int64_t item = item_of(n);
    const int h = static_cast<int>(item % v_heads), slot = item_slot[n];
    __syncthreads();  // the previous item's vectors are no longer read
#pragma unroll
    for (int i = 0; i < 2; ++i) {
      const int e = tid + i * static_cast<int>(blockDim.x);
      if (e < n_vec) q_s[e] = vec_next[i];  // q_s .. z_s are one array
    }
    if (n + 1 < count) load_vectors(n + 1);
    __pipeline_wait_prior(kStages - 1);  // item n's group: the kStages - 1 after it may be pending
    __syncthreads();
    float acc = 0.f;
    if (slot >= 0) {  // the same for the whole block
      const float decay = gates[0], beta = gates[1];
      const float* S_col = stages + (n % kStages) * head + base * dv + j;
      float* S_glob = p.state + (static_cast<int64_t>(slot) * v_heads + h) * head + base * dv + j;
      float u = 0.f;
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        const float s = S_col[r * dv] * decay;
        u += s * k_s[base + r];
      }
      red[tid] = u;  // = red[part * dv + j]
      __syncthreads();
      float ku = 0.f;
#pragma unroll
      for (int q = 0; q < kStateParts; ++q) ku += red[q * dv + j];
      u = beta * (v_s[j] - ku);
#pragma unroll
      for (int r = 0; r < RPT; ++r) {
        float s = S_col[r * dv] * decay;
        s += k_s[base + r] * u;  // two statements: the contraction is fma(k, u, s)
        acc += s * q_s[base + r];
        S_glob[r * dv] = s;
      }
    }
    __syncthreads();  // this item's stage and part sums are read: the stage takes item n + kStages
    issue(n + kStages);
    if (slot >= 0) {
      red[tid] = acc;
      __syncthreads();
      float o = 0.f;
      if (part == 0)
        for (int q = 0; q < kStateParts; ++q) o += red[q * dv + j];
      const float ss = block_sum(part == 0 ? o * o : 0.f, scratch);
      if (part == 0) {
        const float inv = 1.f / sqrtf(ss / static_cast<float>(dv) + p.eps);
        const float zv = z_s[j];
        p.out.at(item_token[n], h)[j] =
            p.norm_weight[j] * (o * inv) * (zv / (1.f + expf(-zv)));
      }
    }
  }
}

// The state kernel's shared memory: the stages, the item's vectors, the part sums, scratch and
// the block's item slots and token offsets.
size_t gdn_decode_state_smem_bytes(int64_t dk, int64_t dv, int stages) {
  return static_cast<size_t>(stages * dk * dv + 2 * dk + 2 * dv + 2 + kStateParts * dv + 32 + 2 * kMaxBlockItems) *
         sizeof(float);
}

template <int RPT, int kStages>
Status launch_state(const GdnDecodeParams& p, const float* vec, cudaStream_t stream) {
  auto kernel = gdn_decode_state_kernel<RPT, kStages>;
  const int threads = static_cast<int>(kStateParts * p.dv);
  const size_t smem = gdn_decode_state_smem_bytes(p.dk, p.dv, kStages);
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(kernel), static_cast<int64_t>(smem),
                                           "gdn_decode_state_kernel"));
  const int resident = resident_blocks(reinterpret_cast<const void*>(kernel), threads, smem);
  if (resident < 1)
    return internal_error("gdn_decode_state_kernel: no block of " + std::to_string(smem) +
                          " bytes of shared memory fits a multiprocessor");
  const int64_t items = p.rows * p.v_heads;
  const int64_t grid = std::max(std::min<int64_t>(items, resident), (items + kMaxBlockItems - 1) / kMaxBlockItems);
  launch_pdl(kernel, dim3(static_cast<unsigned>(grid)), threads, smem, stream, p, vec);
  return {};
}

template <int kStages>
Status launch_state_dk(const GdnDecodeParams& p, const float* vec, cudaStream_t stream) {
  switch (p.dk) {
    case 16: return launch_state<4, kStages>(p, vec, stream);
    case 32: return launch_state<8, kStages>(p, vec, stream);
    case 64: return launch_state<16, kStages>(p, vec, stream);
    default: return launch_state<32, kStages>(p, vec, stream);
  }
}

}  // namespace

bool gdn_decode_split_applies(int64_t dk, int64_t dv) {
  return (dk == 16 || dk == 32 || dk == 64 || dk == 128) && dv >= 8 && dv % 8 == 0 && kStateParts * dv <= 512 &&
         2 * dk + 2 * dv + 2 <= 2 * kStateParts * dv &&
         static_cast<int64_t>(gdn_decode_state_smem_bytes(dk, dv, 1)) <= device_target().shared_optin;
}

size_t gdn_decode_vectors_floats(int64_t rows, int64_t k_heads, int64_t v_heads, int64_t dk, int64_t dv) {
  return k_heads <= 0 ? 0 : static_cast<size_t>(rows * k_heads * record_floats(dk, dv, v_heads / k_heads));
}

Status gdn_decode_split(const GdnDecodeParams& p, float* vec, int stages, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " v_heads=" +
           std::to_string(p.v_heads) + " dk=" + std::to_string(p.dk) + " dv=" + std::to_string(p.dv) +
           " stages=" + std::to_string(stages);
  };
  if (p.rows == 0) return {};
  if (p.tokens != p.rows || !gdn_decode_split_applies(p.dk, p.dv) || reinterpret_cast<uintptr_t>(p.state) % 16 != 0 ||
      p.rows > 65535 || p.conv_kernel < 2 || stages < 1 || stages > 3)
    return invalid_argument("gdn_decode_split: needs one token a row, dk in 16..128, dv <= 128, a 16-byte aligned "
                            "state and 1..3 stages (" + shape() + ")");
  // Fewer stages where the target's shared memory holds fewer copies of a head's state (two
  // take 131 KB at dk = dv = 128: not on the 99 KB GPUs).
  while (stages > 1 && static_cast<int64_t>(gdn_decode_state_smem_bytes(p.dk, p.dv, stages)) > device_target().shared_optin)
    --stages;
  const int64_t channels = 2 * p.dk + (p.v_heads / p.k_heads) * p.dv;
  const int vec_threads = static_cast<int>(std::min<int64_t>(1024, (channels + 31) / 32 * 32));
  launch_pdl(gdn_decode_vectors_kernel, dim3(static_cast<unsigned>(p.k_heads), static_cast<unsigned>(p.rows)),
             vec_threads, 0, stream, p, vec);
  KILN_RETURN_IF_ERROR(launch_status("gdn_decode_vectors_kernel", shape, stream));
  Status s = stages == 1   ? launch_state_dk<1>(p, vec, stream)
             : stages == 2 ? launch_state_dk<2>(p, vec, stream)
                           : launch_state_dk<3>(p, vec, stream);
  if (!s.ok()) return s.with_context(shape());
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
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(gdn_decode_kernel), static_cast<int64_t>(smem),
                                           "gdn_decode_kernel")
                           .with_context(shape()));
  const int64_t cols = (p.v_heads / p.k_heads) * p.dv;
  int threads = static_cast<int>(((cols + 31) / 32) * 32);
  if (threads > 1024) threads = 1024;
  if (threads < 64) threads = 64;
  dim3 grid(static_cast<unsigned>(p.k_heads), static_cast<unsigned>(p.rows));
  launch_pdl(gdn_decode_kernel, grid, threads, smem, stream, p);
  return launch_status("gdn_decode_kernel", shape, stream);
}

}  // namespace kiln::cuda
