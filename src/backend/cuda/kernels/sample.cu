#include <algorithm>
#include <climits>
#include <cmath>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/sample.h"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr unsigned kFull = 0xffffffffu;
// Top-p masses in fixed point: probabilities <= 1 sum to < 2^63 even with every rounding up.
constexpr double kFixed = 0x1.0p62;
// Static shared memory is a few KB; the dynamic part (the penalty bitmap) gets the rest.
constexpr int64_t kMaxDynamicShared = 200 * 1024;

// Order-preserving uint32 image of a float (larger float, larger key; -0 sorts below +0).
__device__ __forceinline__ unsigned float_key(float f) {
  const unsigned u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}
__device__ __forceinline__ float key_float(unsigned k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}
// Non-negative doubles order as their bits.
__device__ __forceinline__ unsigned long long prob_key(double p) {
  return static_cast<unsigned long long>(__double_as_longlong(p));
}

struct MaxOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a > b ? a : b; }
};
struct SumOp {
  template <typename T>
  __device__ __forceinline__ T operator()(T a, T b) const { return a + b; }
};

// One more in hist[d] for every lane whose d < 256, one atomic per distinct bin of the warp (the
// first radix passes put most of a row in a handful of bins). Every lane of the warp calls it.
__device__ __forceinline__ void warp_count(unsigned* hist, unsigned d) {
  const unsigned peers = __match_any_sync(kFull, d);
  if (d < 256u && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1)
    atomicAdd(&hist[d], static_cast<unsigned>(__popc(peers)));
}

// Adds every lane's v (where d < 256) to mass[d], one atomic per distinct bin of the warp: in the
// first top-p passes nearly a whole row shares a bin, and one shared atomic per element
// serialised the block. Integer sums, so the order does not change the result. Every lane of the
// warp calls it.
__device__ __forceinline__ void warp_mass(unsigned long long* mass, unsigned d, unsigned long long v) {
  const unsigned peers = __match_any_sync(kFull, d);
  unsigned long long sum = 0ull;
  if (peers == kFull) {  // the same bin in every lane: uniform across the warp
    if (d >= 256u) return;
    sum = v;
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
  } else {
    for (int src = 0; src < 32; ++src) {
      const unsigned long long other = __shfl_sync(kFull, v, src);
      if (peers & (1u << src)) sum += other;
    }
  }
  if (d < 256u && static_cast<int>(threadIdx.x & 31) == __ffs(peers) - 1) atomicAdd(mass + d, sum);
}

// Reduction over the block (all kThreads threads call it); every thread gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T block_reduce(T v, T* scratch, Op op) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(kFull, v, o));
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  T t = scratch[lane];  // kWarps == 32
  for (int o = 16; o > 0; o >>= 1) t = op(t, __shfl_xor_sync(kFull, t, o));
  return t;
}

// The better of two candidates (probability, index) in the host's top_indices order: larger
// probability, then lower index.
__device__ __forceinline__ bool better(double p, int i, double q, int j) { return p > q || (p == q && i < j); }

// The best candidate over the block (all kThreads threads call it); every thread gets it.
__device__ __forceinline__ void block_best(double& p, int& i, double* scratch_p, int* scratch_i) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  auto warp_best = [&] {
    for (int o = 16; o > 0; o >>= 1) {
      const double q = __shfl_xor_sync(kFull, p, o);
      const int j = __shfl_xor_sync(kFull, i, o);
      if (better(q, j, p, i)) p = q, i = j;
    }
  };
  warp_best();
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch_p[warp] = p, scratch_i[warp] = i;
  __syncthreads();
  p = scratch_p[lane];  // kWarps == 32
  i = scratch_i[lane];
  warp_best();
}

// Exclusive prefix sum over the block in thread order (all kThreads threads call it).
template <typename T>
__device__ __forceinline__ T block_exclusive_scan(T v, T* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T x = v;  // inclusive within the warp
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(kFull, x, o);
    if (lane >= o) x += y;
  }
  T excl = __shfl_up_sync(kFull, x, 1);
  if (lane == 0) excl = T(0);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 31) scratch[warp] = x;
  __syncthreads();
  if (warp == 0) {
    T w = scratch[lane];
    for (int o = 1; o < 32; o <<= 1) {
      const T y = __shfl_up_sync(kFull, w, o);
      if (lane >= o) w += y;
    }
    T we = __shfl_up_sync(kFull, w, 1);
    if (lane == 0) we = T(0);
    scratch[lane] = we;  // exclusive over warps
  }
  __syncthreads();
  return scratch[warp] + excl;
}

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleParams p) {
  pdl_begin();
  extern __shared__ unsigned seen_bits[];  // [ceil(vocab / 32)]: repetition penalty claims
  __shared__ unsigned hist[256];
  __shared__ unsigned long long mass[256];
  __shared__ double scratch_d[kWarps];
  __shared__ float scratch_f[kWarps];
  __shared__ unsigned scratch_u[kWarps];
  __shared__ int scratch_i[kWarps];
  __shared__ unsigned long long s_key, s_above;
  __shared__ unsigned s_count;
  __shared__ int s_best, s_last;

  const int64_t row = blockIdx.x;
  const int V = static_cast<int>(p.vocab);
  const int tid = threadIdx.x;
  const SampleRowParams rp = p.row_params[row];
  const float* in = p.logits.row(row);
  float* w = p.work + row * p.vocab;
  double* P = p.probs + row * p.vocab;
  // A contiguous slice of the row per thread, for the passes that walk in index order.
  const int seg = (V + kThreads - 1) / kThreads;
  const int seg_begin = min(V, tid * seg), seg_end = min(V, seg_begin + seg);

  // ---- penalties and temperature (float ops rounded one by one, as on the host) ----
  // Greedy rows keep their logits (no temperature) and skip the cuts; the softmax gives the logprob.
  const bool greedy = rp.temperature == 0.f;
  const bool repetition = rp.repetition_penalty != 1.f;
  const bool additive = rp.presence_penalty != 0.f || rp.frequency_penalty != 0.f;
  const bool biased = rp.bias_count > 0;
  const unsigned* allowed = rp.mask_offset >= 0 ? p.masks + rp.mask_offset : nullptr;
  if (!repetition && !additive && !biased && allowed == nullptr) {
    for (int i = tid; i < V; i += kThreads) w[i] = greedy ? in[i] : __fdiv_rn(in[i], rp.temperature);
  } else {
    if (allowed == nullptr) {
      for (int i = tid; i < V; i += kThreads) w[i] = in[i];
    } else {
      for (int i = tid; i < V; i += kThreads) w[i] = (allowed[i >> 5] >> (i & 31)) & 1u ? in[i] : -INFINITY;
    }
    __syncthreads();
    for (int j = tid; j < rp.bias_count; j += kThreads) {
      const int t = p.bias_ids[rp.bias_offset + j];
      w[t] = __fadd_rn(w[t], p.bias_values[rp.bias_offset + j]);
    }
    __syncthreads();
    if (repetition) {
      for (int i = tid; i < (V + 31) / 32; i += kThreads) seen_bits[i] = 0u;
      __syncthreads();
      for (int j = tid; j < rp.seen_count; j += kThreads) {
        const int t = p.seen[rp.seen_offset + j];
        if (t < 0 || t >= V) continue;
        const unsigned bit = 1u << (t & 31);
        if (atomicOr(&seen_bits[t >> 5], bit) & bit) continue;  // a repeat: its first claim applies it
        const float l = w[t];
        w[t] = l > 0 ? __fdiv_rn(l, rp.repetition_penalty) : __fmul_rn(l, rp.repetition_penalty);
      }
      __syncthreads();
    }
    if (additive) {
      for (int j = tid; j < rp.gen_count; j += kThreads) {
        const int t = p.generated[2 * (rp.gen_offset + j)];
        const int n = p.generated[2 * (rp.gen_offset + j) + 1];
        if (t < 0 || t >= V) continue;
        w[t] = __fsub_rn(w[t], __fmaf_rn(rp.frequency_penalty, static_cast<float>(n), rp.presence_penalty));
      }
      __syncthreads();
    }
    if (!greedy)
      for (int i = tid; i < V; i += kThreads) w[i] = __fdiv_rn(w[i], rp.temperature);
  }
  __syncthreads();

  // ---- top-k: the k-th largest value by radix select, 8 bits a pass from the top ----
  if (!greedy && rp.top_k > 0 && rp.top_k < V) {
    unsigned prefix = 0u, mask = 0u, remaining = static_cast<unsigned>(rp.top_k);
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) hist[i] = 0u;
      __syncthreads();
      for (int base = 0; base < V; base += kThreads) {  // warp-uniform trip count for warp_count
        const int i = base + tid;
        unsigned d = 256u;  // no bin
        if (i < V) {
          const unsigned key = float_key(w[i]);
          if ((key & mask) == prefix) d = (key >> shift) & 255u;
        }
        warp_count(hist, d);
      }
      __syncthreads();
      if (tid == 0) {
        unsigned rem = remaining;
        int d = 255;
        for (; d > 0 && hist[d] < rem; --d) rem -= hist[d];
        s_key = prefix | (static_cast<unsigned>(d) << shift);
        s_count = rem;
      }
      __syncthreads();
      prefix = static_cast<unsigned>(s_key);
      remaining = s_count;
      mask |= 255u << shift;
    }
    const float kth = key_float(prefix);
    for (int i = tid; i < V; i += kThreads)
      if (w[i] < kth) w[i] = -INFINITY;
    __syncthreads();
  }

  // ---- softmax in double ----
  float m = -INFINITY;
  for (int i = tid; i < V; i += kThreads) m = fmaxf(m, w[i]);
  m = block_reduce(m, scratch_f, MaxOp());
  double local = 0;
  for (int i = tid; i < V; i += kThreads) {
    const double e = exp(static_cast<double>(w[i]) - static_cast<double>(m));
    P[i] = e;
    local += e;
  }
  const double total = block_reduce(local, scratch_d, SumOp());
  if (total > 0)
    for (int i = tid; i < V; i += kThreads) P[i] = P[i] / total;

  // ---- min-p (each thread touches only its own strided elements until the next barrier) ----
  if (!greedy && rp.min_p > 0.f) {
    double pm = 0;
    for (int i = tid; i < V; i += kThreads) pm = fmax(pm, P[i]);
    pm = block_reduce(pm, scratch_d, MaxOp());
    const double cut = static_cast<double>(rp.min_p) * pm;
    double kept = 0;
    for (int i = tid; i < V; i += kThreads) {
      const double q = P[i];
      if (q < cut) P[i] = 0;
      else kept += q;
    }
    kept = block_reduce(kept, scratch_d, SumOp());
    if (kept > 0)
      for (int i = tid; i < V; i += kThreads) P[i] = P[i] / kept;
  }
  __syncthreads();

  // ---- top-p: the last kept probability by radix select over masses ----
  if (!greedy && rp.top_p < 1.f) {
    const double target = static_cast<double>(rp.top_p) - 1e-6;
    const unsigned long long target_q = target > 0 ? __double2ull_rn(target * kFixed) : 0ull;
    unsigned long long prefix = 0ull, mask = 0ull, above = 0ull;
    unsigned ties = 0u;
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int i = tid; i < 256; i += kThreads) {
        hist[i] = 0u;
        mass[i] = 0ull;
      }
      __syncthreads();
      for (int base = 0; base < V; base += kThreads) {  // warp-uniform trip count for warp_count
        const int i = base + tid;
        unsigned d = 256u;  // no bin
        double q = 0;
        if (i < V) {
          q = P[i];
          const unsigned long long key = prob_key(q);
          if (q > 0 && (key & mask) == prefix) d = static_cast<unsigned>(key >> shift) & 255u;
        }
        warp_count(hist, d);
        warp_mass(mass, d, d < 256u ? __double2ull_rn(q * kFixed) : 0ull);
      }
      __syncthreads();
      if (tid == 0) {
        // From the most probable bin down: the first whose mass brings the total to the target
        // holds the last kept token. Short of the target (rounding): the lowest bin, all kept.
        unsigned long long acc = above;
        int chosen = -1, lowest = -1;
        for (int d = 255; d >= 0; --d) {
          if (hist[d] == 0u) continue;
          lowest = d;
          if (acc + mass[d] >= target_q) {
            chosen = d;
            break;
          }
          acc += mass[d];
        }
        if (chosen < 0 && lowest >= 0) {
          chosen = lowest;
          acc -= mass[lowest];
        }
        if (chosen < 0) chosen = 0;  // no mass at all: nothing to cut
        s_key = prefix | (static_cast<unsigned long long>(chosen) << shift);
        s_above = acc;
        s_count = hist[chosen];
      }
      __syncthreads();
      prefix = s_key;
      above = s_above;
      ties = s_count;
      mask |= 255ull << shift;
    }
    const double last_p = __longlong_as_double(static_cast<long long>(prefix));
    const unsigned long long q_last = __double2ull_rn(last_p * kFixed);
    const unsigned long long need = target_q > above ? target_q - above : 0ull;
    unsigned long long keep = need == 0ull ? 1ull : (q_last == 0ull ? ties : (need + q_last - 1ull) / q_last);
    if (keep > ties) keep = ties;
    if (keep < 1ull) keep = 1ull;
    if (keep >= ties) {
      for (int i = tid; i < V; i += kThreads)
        if (P[i] < last_p) P[i] = 0;
    } else {
      // Only some of the tied tokens stay: the lowest indices, ranked by a scan over the slices.
      unsigned n = 0u;
      for (int i = seg_begin; i < seg_end; ++i) n += P[i] == last_p;
      unsigned rank = block_exclusive_scan(n, scratch_u);
      for (int i = seg_begin; i < seg_end; ++i) {
        const double q = P[i];
        if (q == last_p) {
          if (rank >= keep) P[i] = 0;
          ++rank;
        } else if (q < last_p) {
          P[i] = 0;
        }
      }
    }
    __syncthreads();
    double kept = 0;
    for (int i = tid; i < V; i += kThreads) kept += P[i];
    kept = block_reduce(kept, scratch_d, SumOp());
    if (kept > 0)
      for (int i = tid; i < V; i += kThreads) P[i] = P[i] / kept;
    __syncthreads();
  }

  // ---- the token: the first largest logit (greedy), or the draw: the first token, in index
  // order, with u < cumulative probability ----
  if (tid == 0) {
    s_best = INT_MAX;
    s_last = -1;
  }
  __syncthreads();
  if (greedy) {
    int first = INT_MAX;
    for (int i = tid; i < V; i += kThreads)
      if (w[i] == m) {
        first = i;
        break;
      }
    if (first != INT_MAX) atomicMin(&s_best, first);
  } else {
    double slice = 0;
    for (int i = seg_begin; i < seg_end; ++i) slice += P[i];
    double cum = block_exclusive_scan(slice, scratch_d);
    int last = -1, hit = -1;
    for (int i = seg_begin; i < seg_end; ++i) {
      const double q = P[i];
      if (!(q > 0)) continue;
      last = i;
      cum += q;
      if (rp.u < cum) {
        hit = i;
        break;
      }
    }
    if (hit >= 0) atomicMin(&s_best, hit);
    if (last >= 0) atomicMax(&s_last, last);  // only read when no slice hit, i.e. none stopped early
  }
  __syncthreads();
  if (tid == 0) {
    const int token = s_best != INT_MAX ? s_best : (s_last >= 0 ? s_last : 0);
    p.ids[row] = token;
    p.logprobs[row] = static_cast<float>(log(P[token]));
  }

  // ---- the top_n alternatives of the final distribution, one block reduction each ----
  double prev_p = 2.0;  // above every probability: the first pass may take any token
  int prev_i = -1;
  for (int k = 0; k < rp.top_n; ++k) {
    double bp = -1.0;  // no candidate
    int bi = INT_MAX;
    for (int i = tid; i < V; i += kThreads) {
      const double q = P[i];
      if (better(prev_p, prev_i, q, i) && better(q, i, bp, bi)) bp = q, bi = i;
    }
    block_best(bp, bi, scratch_d, scratch_i);
    if (bi == INT_MAX) break;  // fewer tokens than asked for
    if (tid == 0) {
      p.top_ids[row * p.top_stride + k] = bi;
      p.top_logprobs[row * p.top_stride + k] = static_cast<float>(log(bp));
    }
    prev_p = bp;
    prev_i = bi;
  }
}

}  // namespace

int64_t sample_shared_bytes(int64_t vocab) { return (vocab + 31) / 32 * 4; }
int64_t sample_max_shared_bytes() { return std::min(kMaxDynamicShared, device_target().shared_optin); }

Status sample(const SampleParams& p, cudaStream_t stream) {
  if (p.rows == 0) return {};
  const int64_t shared = sample_shared_bytes(p.vocab);
  if (p.vocab <= 0 || p.vocab > INT_MAX || shared > sample_max_shared_bytes())
    return invalid_argument("sample: vocab " + std::to_string(p.vocab) + " out of range");
  KILN_RETURN_IF_ERROR(allow_shared_memory(reinterpret_cast<const void*>(sample_kernel), shared, "sample"));
  launch_pdl(sample_kernel, static_cast<unsigned>(p.rows), kThreads, static_cast<size_t>(shared), stream, p);
  return launch_status("sample", [&] { return "rows=" + std::to_string(p.rows) + " vocab=" + std::to_string(p.vocab); },
                       stream);
}

}  // namespace kiln::cuda
