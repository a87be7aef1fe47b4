#include <algorithm>

#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/optimizer.h"
#include "backend/cuda/kernels/reduce.cuh"

namespace kiln::cuda {

namespace {

// The elementwise updates use the _rn intrinsics, which the compiler may not fuse into FMAs: the
// host reference is compiled without contraction, so each f32 operation rounds as it does there
// and the state stays bit-comparable over many steps.

constexpr int kThreads = 256;
constexpr int kNormBlocks = 256;          // partial sums of |b|^2, reduced by the next kernel
constexpr int kTile = 16;                 // Gram and polynomial tiles: 16 x 16 threads
constexpr int kApplyK = 32, kApplyI = 8;  // the update's tile: 8 rows of the iterate x 32 columns
constexpr double kA = 3.4445, kB = -4.7750, kC = 2.0315;  // cpu/optimizer.cc's Newton-Schulz-5

__global__ void sgd_kernel(SgdParams p) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    p.param[i] = __fsub_rn(__fmul_rn(p.param[i], p.decay), __fmul_rn(p.lr, __fmul_rn(p.grad[i], p.grad_scale)));
}

__global__ void adamw_kernel(AdamWParams p) {
  const float one_b1 = 1.f - p.beta1, one_b2 = 1.f - p.beta2;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < p.n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(p.grad[i], p.grad_scale);
    const float m = __fadd_rn(__fmul_rn(p.beta1, p.m[i]), __fmul_rn(one_b1, g));
    const float v = __fadd_rn(__fmul_rn(p.beta2, p.v[i]), __fmul_rn(__fmul_rn(one_b2, g), g));
    p.m[i] = m;
    p.v[i] = v;
    const double mhat = __ddiv_rn(static_cast<double>(m), p.c1), vhat = __ddiv_rn(static_cast<double>(v), p.c2);
    const double step = __ddiv_rn(__dmul_rn(static_cast<double>(p.lr), mhat),
                                  __dadd_rn(sqrt(vhat), static_cast<double>(p.eps)));
    p.param[i] = __double2float_rn(__dsub_rn(static_cast<double>(__fmul_rn(p.param[i], p.decay)), step));
  }
}

// A vector (one row or one column): momentum and the update in one pass, b as it is (gain 1).
__global__ void muon_vector_kernel(MuonParams p) {
  const int64_t n = p.rows * p.cols;
  const float lr_gain = __fmul_rn(p.lr, p.gain);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float g = __fmul_rn(p.grad[i], p.grad_scale), m = __fadd_rn(__fmul_rn(p.momentum, p.m[i]), g);
    p.m[i] = m;
    const float b = p.nesterov ? __fadd_rn(g, __fmul_rn(p.momentum, m)) : m;
    p.param[i] = __fsub_rn(__fmul_rn(p.param[i], p.decay), __fmul_rn(lr_gain, b));
  }
}

// The matrix kernels below serve a group of matrices of one shape (MuonGroup): the group's index
// is a grid dimension, and each matrix's scratch (one MuonLayout) lies `stride` bytes after the
// previous one's; a matrix's work, and its order of summation, do not depend on the group.
template <typename T>
__device__ __forceinline__ T* at(void* scratch, size_t stride, int i, size_t off) {
  return reinterpret_cast<T*>(static_cast<char*>(scratch) + static_cast<size_t>(i) * stride + off);
}

// Grid (blocks, group). Momentum into m, the update direction into b, and each block's partial
// sum of b^2 (double).
__global__ void muon_momentum_kernel(MuonGroup g, size_t stride, size_t b_off, size_t partial_off) {
  __shared__ double scratch[32];
  const int mat = blockIdx.y;
  const MuonParams& p = g.p;
  float* mom = g.m[mat];
  const float* grad = g.grad[mat];
  float* b = at<float>(g.scratch, stride, mat, b_off);
  const int64_t n = p.rows * p.cols;
  double ss = 0.0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float gr = __fmul_rn(grad[i], p.grad_scale), m = __fadd_rn(__fmul_rn(p.momentum, mom[i]), gr);
    mom[i] = m;
    const float v = p.nesterov ? __fadd_rn(gr, __fmul_rn(p.momentum, m)) : m;
    b[i] = v;
    ss += static_cast<double>(v) * v;
  }
  ss = block_sum(ss, scratch);
  if (threadIdx.x == 0) at<double>(g.scratch, stride, mat, partial_off)[blockIdx.x] = ss;
}

// Grid (blocks, group). y [s, n] = b / ||b||_F, b [rows, cols]: y = b when wide (rows <= cols),
// b^T when tall. A zero b stays zero (the CPU returns before dividing).
__global__ void muon_normalize_kernel(void* scr, size_t stride, size_t b_off, size_t partial_off, int parts,
                                      int64_t rows, int64_t cols, size_t y_off) {
  __shared__ double norm_s;
  const int mat = blockIdx.y;
  const float* b = at<float>(scr, stride, mat, b_off);
  const double* partial = at<double>(scr, stride, mat, partial_off);
  float* y = at<float>(scr, stride, mat, y_off);
  if (threadIdx.x == 0) {
    double t = 0.0;
    for (int i = 0; i < parts; ++i) t += partial[i];
    norm_s = sqrt(t);
  }
  __syncthreads();
  const double norm = norm_s;
  const bool wide = rows <= cols;
  const int64_t n = wide ? cols : rows, total = rows * cols;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = wide ? b[e] : b[(e % n) * cols + e / n];  // tall: y[i, k] = b[k, i]
    y[e] = norm == 0.0 ? v : __double2float_rn(__ddiv_rn(static_cast<double>(v), norm));
  }
}

// Grid (s tiles, s tiles, splits * group): out[z, i, j] = sum over split z's columns k of
// y[i, k] y[j, k].
__global__ void gram_kernel(void* scr, size_t stride, size_t y_off, int64_t s, int64_t n, int64_t chunk, int splits,
                            size_t out_off) {
  __shared__ float ti[kTile][kTile + 1], tj[kTile][kTile + 1];
  const int mat = static_cast<int>(blockIdx.z) / splits, split = static_cast<int>(blockIdx.z) % splits;
  const float* y = at<float>(scr, stride, mat, y_off);
  double* out = at<double>(scr, stride, mat, out_off);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kTile, j0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t k_begin = static_cast<int64_t>(split) * chunk;
  const int64_t k_end = k_begin + chunk < n ? k_begin + chunk : n;
  double acc = 0.0;
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTile) {
    const int64_t k = k0 + tx;
    ti[ty][tx] = i0 + ty < s && k < k_end ? y[(i0 + ty) * n + k] : 0.f;
    tj[ty][tx] = j0 + ty < s && k < k_end ? y[(j0 + ty) * n + k] : 0.f;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += static_cast<double>(ti[ty][kk]) * static_cast<double>(tj[tx][kk]);
    __syncthreads();
  }
  if (i0 + ty < s && j0 + tx < s) out[(static_cast<int64_t>(split) * s + i0 + ty) * s + j0 + tx] = acc;
}

// Grid (blocks, group): g[e] = sum over the splits of part[z, e].
__global__ void gram_reduce_kernel(void* scr, size_t stride, size_t part_off, int splits, int64_t ss, size_t g_off) {
  const int mat = blockIdx.y;
  const double* part = at<double>(scr, stride, mat, part_off);
  double* g = at<double>(scr, stride, mat, g_off);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < ss;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double t = 0.0;
    for (int z = 0; z < splits; ++z) t += part[z * ss + e];
    g[e] = t;
  }
}

// Grid (s tiles, s tiles, group): poly = kB g + kC g g.
__global__ void muon_poly_kernel(void* scr, size_t stride, size_t g_off, int64_t s, size_t poly_off) {
  __shared__ double a[kTile][kTile + 1], b[kTile][kTile + 1];
  const int mat = blockIdx.z;
  const double* g = at<double>(scr, stride, mat, g_off);
  double* poly = at<double>(scr, stride, mat, poly_off);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kTile + ty, j = static_cast<int64_t>(blockIdx.x) * kTile + tx;
  double acc = 0.0;
  for (int64_t k0 = 0; k0 < s; k0 += kTile) {
    a[ty][tx] = i < s && k0 + tx < s ? g[i * s + k0 + tx] : 0.0;
    b[ty][tx] = k0 + ty < s && j < s ? g[(k0 + ty) * s + j] : 0.0;
    __syncthreads();
#pragma unroll
    for (int kk = 0; kk < kTile; ++kk) acc += a[ty][kk] * b[kk][tx];
    __syncthreads();
  }
  if (i < s && j < s) poly[i * s + j] = kB * g[i * s + j] + kC * acc;
}

// Grid (n / kApplyK, s / kApplyI, group), block (kApplyK, kApplyI): next = float(kA y + poly y),
// summed over poly's columns in ascending order from kA y, as the CPU does.
__global__ void muon_apply_kernel(void* scr, size_t stride, size_t y_off, size_t poly_off, int64_t s, int64_t n,
                                  size_t next_off) {
  __shared__ double pt[kApplyI][kApplyK + 1];
  __shared__ float yt[kApplyK][kApplyK + 1];
  const int mat = blockIdx.z;
  const float* y = at<float>(scr, stride, mat, y_off);
  const double* poly = at<double>(scr, stride, mat, poly_off);
  float* next = at<float>(scr, stride, mat, next_off);
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t i = static_cast<int64_t>(blockIdx.y) * kApplyI + ty;
  const int64_t k = static_cast<int64_t>(blockIdx.x) * kApplyK + tx;
  double acc = i < s && k < n ? kA * static_cast<double>(y[i * n + k]) : 0.0;
  for (int64_t j0 = 0; j0 < s; j0 += kApplyK) {
    pt[ty][tx] = i < s && j0 + tx < s ? poly[i * s + j0 + tx] : 0.0;
    for (int r = ty; r < kApplyK; r += kApplyI) yt[r][tx] = j0 + r < s && k < n ? y[(j0 + r) * n + k] : 0.f;
    __syncthreads();
#pragma unroll 8
    for (int jj = 0; jj < kApplyK; ++jj) acc += pt[ty][jj] * static_cast<double>(yt[jj][tx]);
    __syncthreads();
  }
  if (i < s && k < n) next[i * n + k] = __double2float_rn(acc);
}

// Grid (blocks, group): p = p * decay - lr * gain * o, o read from the iterate y [s, n]
// (transposed back when tall).
__global__ void muon_update_kernel(MuonGroup g, size_t stride, size_t y_off) {
  const int mat = blockIdx.y;
  const MuonParams& p = g.p;
  float* param = g.param[mat];
  const float* y = at<float>(g.scratch, stride, mat, y_off);
  const bool wide = p.rows <= p.cols;
  const int64_t total = p.rows * p.cols;
  const float lr_gain = __fmul_rn(p.lr, p.gain);
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < total;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float o = wide ? y[e] : y[(e % p.cols) * p.rows + e / p.cols];  // tall: b[r, c] = y[c, r]
    param[e] = __fsub_rn(__fmul_rn(param[e], p.decay), __fmul_rn(lr_gain, o));
  }
}

size_t align256(size_t bytes) { return (bytes + 255) & ~size_t{255}; }

// Where each piece of a Muon step's scratch lies (byte offsets into one buffer).
struct MuonLayout {
  int64_t s = 0, n = 0, chunk = 0;
  int splits = 1;
  size_t b = 0, y0 = 0, y1 = 0, partial = 0, gram_part = 0, gram = 0, poly = 0, total = 0;
};

// The Gram product's columns split over blocks so that a rank-8 factor still fills the GPU
// (each split at least 256 columns); the splits are summed in a fixed order.
MuonLayout muon_layout(int64_t rows, int64_t cols) {
  MuonLayout l;
  l.s = std::min(rows, cols);
  l.n = std::max(rows, cols);
  const int64_t tiles = (l.s + kTile - 1) / kTile;
  const int64_t want = (264 + tiles * tiles - 1) / (tiles * tiles);
  l.splits = static_cast<int>(std::max<int64_t>(1, std::min(want, l.n / 256)));
  l.chunk = ((l.n + l.splits - 1) / l.splits + kTile - 1) / kTile * kTile;
  const size_t f = sizeof(float), d = sizeof(double), sn = static_cast<size_t>(l.s * l.n), ss = static_cast<size_t>(l.s * l.s);
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += align256(bytes);
    return at;
  };
  l.b = take(sn * f);
  l.y0 = take(sn * f);
  l.y1 = take(sn * f);
  l.partial = take(kNormBlocks * d);
  l.gram_part = take(static_cast<size_t>(l.splits) * ss * d);
  l.gram = take(ss * d);
  l.poly = take(ss * d);
  l.total = off;
  return l;
}

std::string vec_shape(int64_t n) { return "n=" + std::to_string(n); }

}  // namespace

Status sgd_step(const SgdParams& p, cudaStream_t stream) {
  if (p.n == 0) return {};
  sgd_kernel<<<grid_blocks(p.n, kThreads, 4096), kThreads, 0, stream>>>(p);
  return launch_status("sgd_kernel", [&] { return vec_shape(p.n); }, stream);
}

Status adamw_step(const AdamWParams& p, cudaStream_t stream) {
  if (p.n == 0) return {};
  adamw_kernel<<<grid_blocks(p.n, kThreads, 4096), kThreads, 0, stream>>>(p);
  return launch_status("adamw_kernel", [&] { return vec_shape(p.n); }, stream);
}

size_t muon_scratch_bytes(int64_t rows, int64_t cols) {
  if (rows <= 1 || cols <= 1) return 0;
  return muon_layout(rows, cols).total;
}

Status muon_step(const MuonParams& p, cudaStream_t stream) {
  const int64_t total = p.rows * p.cols;
  if (total == 0) return {};
  if (p.rows == 1 || p.cols == 1) {
    auto shape = [&] { return "rows=" + std::to_string(p.rows) + " cols=" + std::to_string(p.cols); };
    muon_vector_kernel<<<grid_blocks(total, kThreads, 4096), kThreads, 0, stream>>>(p);
    return launch_status("muon_vector_kernel", shape, stream);
  }
  MuonGroup g;
  g.p = p;
  g.count = 1;
  g.param[0] = p.param;
  g.grad[0] = p.grad;
  g.m[0] = p.m;
  g.scratch = p.scratch;
  return muon_step_group(g, stream);
}

Status muon_step_group(const MuonGroup& g, cudaStream_t stream) {
  const MuonParams& p = g.p;
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " cols=" + std::to_string(p.cols) + " matrices=" + std::to_string(g.count);
  };
  const int64_t total = p.rows * p.cols;
  if (total == 0 || g.count == 0) return {};
  if (p.rows == 1 || p.cols == 1) return invalid_argument("muon_step_group: vectors go to muon_step (" + shape() + ")");
  if (g.count < 0 || g.count > kMuonMaxGroup)
    return invalid_argument("muon_step_group: 1.." + std::to_string(kMuonMaxGroup) + " matrices (" + shape() + ")");
  const MuonLayout l = muon_layout(p.rows, p.cols);
  if (l.s > kMuonMaxRank)
    return invalid_argument("muon_step: the smaller side exceeds " + std::to_string(kMuonMaxRank) + " (" + shape() + ")");
  if (g.scratch == nullptr) return invalid_argument("muon_step: no scratch (" + shape() + ")");
  const size_t stride = l.total;
  const unsigned count = static_cast<unsigned>(g.count);
  size_t y = l.y0, next = l.y1;
  const size_t gram = l.splits > 1 ? l.gram : l.gram_part;
  const unsigned parts = grid_blocks(total, kThreads, kNormBlocks);
  muon_momentum_kernel<<<dim3(parts, count), kThreads, 0, stream>>>(g, stride, l.b, l.partial);
  KILN_RETURN_IF_ERROR(launch_status("muon_momentum_kernel", shape, stream));
  muon_normalize_kernel<<<dim3(grid_blocks(total, kThreads, 4096), count), kThreads, 0, stream>>>(
      g.scratch, stride, l.b, l.partial, static_cast<int>(parts), p.rows, p.cols, y);
  KILN_RETURN_IF_ERROR(launch_status("muon_normalize_kernel", shape, stream));
  const unsigned tiles = static_cast<unsigned>((l.s + kTile - 1) / kTile);
  const dim3 tile_block(kTile, kTile);
  const dim3 apply_grid(grid_blocks(l.n, kApplyK, 0x7fffffff), static_cast<unsigned>((l.s + kApplyI - 1) / kApplyI),
                        count);
  for (int it = 0; it < p.ns_steps; ++it) {
    gram_kernel<<<dim3(tiles, tiles, static_cast<unsigned>(l.splits) * count), tile_block, 0, stream>>>(
        g.scratch, stride, y, l.s, l.n, l.chunk, l.splits, l.gram_part);
    KILN_RETURN_IF_ERROR(launch_status("gram_kernel", shape, stream));
    if (l.splits > 1) {
      gram_reduce_kernel<<<dim3(grid_blocks(l.s * l.s, kThreads, 1024), count), kThreads, 0, stream>>>(
          g.scratch, stride, l.gram_part, l.splits, l.s * l.s, l.gram);
      KILN_RETURN_IF_ERROR(launch_status("gram_reduce_kernel", shape, stream));
    }
    muon_poly_kernel<<<dim3(tiles, tiles, count), tile_block, 0, stream>>>(g.scratch, stride, gram, l.s, l.poly);
    KILN_RETURN_IF_ERROR(launch_status("muon_poly_kernel", shape, stream));
    muon_apply_kernel<<<apply_grid, dim3(kApplyK, kApplyI), 0, stream>>>(g.scratch, stride, y, l.poly, l.s, l.n, next);
    KILN_RETURN_IF_ERROR(launch_status("muon_apply_kernel", shape, stream));
    std::swap(y, next);
  }
  muon_update_kernel<<<dim3(grid_blocks(total, kThreads, 4096), count), kThreads, 0, stream>>>(g, stride, y);
  return launch_status("muon_update_kernel", shape, stream);
}

}  // namespace kiln::cuda
