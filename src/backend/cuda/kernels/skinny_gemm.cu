#include <cooperative_groups.h>

#include <algorithm>

#include "backend/cuda/kernels/device_code.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/mma_bf16.cuh"
#include "backend/cuda/kernels/occupancy.h"
#include "backend/cuda/kernels/pdl.cuh"
#include "backend/cuda/kernels/skinny_gemm.h"
#include "backend/cuda/kernels/wgmma_bf16.cuh"

namespace kiln::cuda {

namespace {

namespace cg = cooperative_groups;

// A block: 4 warps, each owning 32 weight rows (two m16 tiles of the mma) and every x row (NT
// n8 tiles), over the block's share of k. A pipeline step covers kStepK of k: the warp copies
// its 32 rows' 256-byte pieces (16 lanes a row, 16 bytes a lane: long contiguous reads for the
// DRAM) into its own shared-memory stage, whose 16-byte chunks are swizzled by the row's parity
// so that the fragment reads below meet no bank conflict. For each 32 of k, thread (g, q) of the
// warp reads chunk q of its rows g, g+8, g+16, g+24: the 8 values it holds of each row in that
// block's two m16n8k16 products. That assignment permutes k inside the block (the thread's
// values 0..7 are the mma's k 2q, 2q+1, 2q+8, 2q+9 of the first product and of the second); x
// is loaded with the same permutation, so each dot product is unchanged. Only the warp shares a
// stage: __syncwarp orders its copies and reads, and no block barrier runs inside the loop.
constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kTileRows = 32 * kWarps;
constexpr int kStepK = 128;
constexpr int kChunks = kStepK / 8;  // 16-byte chunks a row a step
constexpr int kStages = 3;
constexpr int kWarpStage = 32 * kChunks;  // uint4s a warp's stage holds
constexpr int kLd = kTileRows + 4;  // floats a row of the partial tile (the pad spreads the banks)
constexpr int kMaxSplits = 16;      // the largest (non-portable) cluster of the H100/H200
constexpr size_t kSmemBytes = size_t{kStages} * kWarps * kWarpStage * 16;  // 96 KB; the partial tile reuses it
static_assert(size_t{kSkinnyMaxM} * kLd * sizeof(float) <= kSmemBytes);

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(s), "l"(gmem) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// Eight consecutive x values of a row as loaded (f32: two float4; bf16: one uint4), and as the
// mma's four bf16 pairs. Loaded a step ahead, converted when used.
template <bool kXF32>
struct X8 {
  float4 a, b;
  __device__ __forceinline__ void load(const void* x, int64_t at) {
    const float4* p = reinterpret_cast<const float4*>(static_cast<const float*>(x) + at);
    a = __ldg(p);
    b = __ldg(p + 1);
  }
  __device__ __forceinline__ uint4 pairs() const {
    return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
  }
};
template <>
struct X8<false> {
  uint4 v;
  __device__ __forceinline__ void load(const void* x, int64_t at) {
    v = __ldg(reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(x) + at));
  }
  __device__ __forceinline__ uint4 pairs() const { return v; }
};

// Thread-block clusters exist from sm_90 on. Code built for older GPUs keeps the split-K reduction
// out (the launcher never splits there: launch_form), so these trap if ever reached.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
__device__ __forceinline__ void cluster_sync() { __trap(); }
__device__ __forceinline__ const float4* cluster_peer(const float4* own, int) {
  __trap();
  return own;
}
#else
__device__ __forceinline__ void cluster_sync() { cg::this_cluster().sync(); }
// `own` in the shared memory of the cluster's block `rank`.
__device__ __forceinline__ const float4* cluster_peer(const float4* own, int rank) {
  return cg::this_cluster().map_shared_rank(own, rank);
}
#endif

// y's tile (kTileRows weight rows at `tile`, every x row) from the partial tiles of a cluster's
// blocks (each block's `part`: [x row][weight row], rows kLd floats apart, written by all its
// threads before the call): each block sums a share of the tile over the cluster's partials, in
// rank order, four adjacent outputs a thread.
__device__ void store_cluster_sum(const SkinnyGemmParams& p, const float* part, int64_t tile, int rank, int splits) {
  const int tid = threadIdx.x;
  if (splits > 1) cluster_sync();
  else __syncthreads();
  const int64_t tile_rows = std::min<int64_t>(kTileRows, p.n - tile * kTileRows);
  const int quads = static_cast<int>(p.m) * (kTileRows / 4);
  const int per = (quads + splits - 1) / splits;
  const int e1 = std::min(quads, (rank + 1) * per);
  for (int e = rank * per + tid; e < e1; e += kThreads) {
    const int mm = e / (kTileRows / 4), r = (e % (kTileRows / 4)) * 4;
    if (r >= tile_rows) continue;
    const float4* own = reinterpret_cast<const float4*>(part + mm * kLd + r);
    float4 s;
    if (splits == 1) {
      s = *own;
    } else {
      float4 v[kMaxSplits];
#pragma unroll
      for (int c = 0; c < kMaxSplits; ++c)
        if (c < splits) v[c] = *cluster_peer(own, c);
      s = v[0];
#pragma unroll
      for (int c = 1; c < kMaxSplits; ++c)
        if (c < splits) {
          s.x += v[c].x;
          s.y += v[c].y;
          s.z += v[c].z;
          s.w += v[c].w;
        }
    }
    float* o = p.out.row(mm) + tile * kTileRows + r;
    const float sv[4] = {s.x, s.y, s.z, s.w};
#pragma unroll
    for (int u = 0; u < 4; ++u)
      if (r + u < tile_rows) o[u] = p.accumulate ? o[u] + sv[u] : sv[u];
  }
  if (splits > 1) cluster_sync();  // no block leaves while another reads its tile
}

// Grid: (row tiles x splits), clusters of `splits` blocks along x: the blocks of a cluster own the
// same kTileRows weight rows and split k's steps between them.
template <bool kXF32, int NT>
__global__ void __launch_bounds__(kThreads) skinny_gemm_kernel(SkinnyGemmParams p, int splits, int steps_per_split) {
  extern __shared__ uint4 stages[];
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, gid = lane >> 2, q = lane & 3;
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(splits));
  const int64_t tile = blockIdx.x / static_cast<unsigned>(splits);
  const int steps = static_cast<int>(p.k / kStepK);
  const int s0 = rank * steps_per_split;
  const int nsteps = std::max(0, std::min(steps, s0 + steps_per_split) - s0);
  const int64_t row0 = tile * kTileRows + warp * 32;
  const int64_t k0 = int64_t{s0} * kStepK;

  // Copies: instruction i moves rows 2i (lanes 0..15) and 2i+1 (lanes 16..31), a 16-byte chunk a
  // lane, to chunk c ^ (4 * row parity) of the row in the warp's stage. Rows past n re-read the
  // last row (their outputs are dropped).
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  uint4* warp_stages = stages + warp * kStages * kWarpStage;
  const int half = lane >> 4, chunk = lane & 15;
  auto issue = [&](int j) {
    uint4* dst = warp_stages + (j % kStages) * kWarpStage + half * kChunks + (chunk ^ (4 * half));
    const int64_t kk = k0 + int64_t{j} * kStepK + chunk * 8;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const int64_t r = std::min<int64_t>(row0 + 2 * i + half, p.n - 1);
      cp_async16(dst + 2 * i * kChunks, w + r * p.k + kk);
    }
  };
  // Weights are never written by a kernel: the first stages are in flight while the predecessor,
  // which writes x, finishes.
#pragma unroll
  for (int j = 0; j < kStages - 1; ++j) {
    if (j < nsteps) issue(j);
    cp_async_commit();
  }
  pdl_begin();

  int64_t xat[NT];  // this thread's x rows (t * 8 + gid, clamped to m - 1) at its k
#pragma unroll
  for (int t = 0; t < NT; ++t) xat[t] = std::min<int64_t>(t * 8 + gid, p.m - 1) * p.x.stride + k0 + q * 8;
  float acc[2][NT][4];
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t)
#pragma unroll
      for (int c = 0; c < 4; ++c) acc[i][t][c] = 0.f;
  const int blocks = nsteps * (kStepK / 32);  // 32-wide k blocks, x loaded one block ahead
  X8<kXF32> xr[NT];
  if (blocks > 0)
#pragma unroll
    for (int t = 0; t < NT; ++t) xr[t].load(p.x.ptr, xat[t]);
  const int swz = 4 * (gid & 1);  // rows g, g+8, g+16, g+24 share g's parity

  for (int j = 0; j < nsteps; ++j) {
    cp_async_wait<kStages - 2>();  // this thread's copies of step j have landed
    __syncwarp();                  // ... and every lane's; step j-1's stage is read by all
    if (j + kStages - 1 < nsteps) issue(j + kStages - 1);
    cp_async_commit();
    const uint4* st = warp_stages + (j % kStages) * kWarpStage + gid * kChunks;
#pragma unroll
    for (int u = 0; u < kStepK / 32; ++u) {
      const int b = j * (kStepK / 32) + u;
      X8<kXF32> xn[NT];
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        if (b + 1 < blocks) xn[t].load(p.x.ptr, xat[t] + (b + 1) * 32);
        else xn[t] = xr[t];
      }
      const int c = (4 * u + q) ^ swz;
      const uint4 w0 = st[c], w1 = st[8 * kChunks + c], w2 = st[16 * kChunks + c], w3 = st[24 * kChunks + c];
      // A fragments of the two m16 tiles (rows g, g+8 and g+16, g+24) for the block's two products.
      const uint32_t a00[4] = {w0.x, w1.x, w0.y, w1.y}, a10[4] = {w2.x, w3.x, w2.y, w3.y};
      const uint32_t a01[4] = {w0.z, w1.z, w0.w, w1.w}, a11[4] = {w2.z, w3.z, w2.w, w3.w};
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const uint4 bx = xr[t].pairs();
        mma_bf16(acc[0][t], a00, bx.x, bx.y);
        mma_bf16(acc[1][t], a10, bx.x, bx.y);
        mma_bf16(acc[0][t], a01, bx.z, bx.w);
        mma_bf16(acc[1][t], a11, bx.z, bx.w);
      }
#pragma unroll
      for (int t = 0; t < NT; ++t) xr[t] = xn[t];
    }
  }

  // The block's partial tile, [x row][weight row of the tile], in the stages' memory.
  cp_async_wait<0>();
  __syncthreads();
  float* part = reinterpret_cast<float*>(stages);
#pragma unroll
  for (int i = 0; i < 2; ++i)
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int r = warp * 32 + i * 16 + gid, c = t * 8 + 2 * q;
      part[c * kLd + r] = acc[i][t][0];
      part[(c + 1) * kLd + r] = acc[i][t][1];
      part[c * kLd + r + 8] = acc[i][t][2];
      part[(c + 1) * kLd + r + 8] = acc[i][t][3];
    }
  store_cluster_sum(p, part, tile, rank, splits);
}

// The wgmma form: a block is one warpgroup over the same kTileRows weight rows, and the tensor
// cores read both operands from shared memory, so no thread loads a fragment. A pipeline step
// covers 64 of k: the block's 128 weight rows and N x rows (m rounded up to 16, 32 or 64; rows
// past m re-read the last one and their outputs are dropped), each a 128-byte row of a swizzled
// tile (wgmma_bf16.cuh), copied by cp.async 16 bytes a thread at a time (8 threads a row: whole
// 128-byte lines), kWgStages steps deep. f32 x is instead loaded into registers a step ahead of
// its stage's copies and stored there rounded to bf16. Weight rows are the products' M (two m64
// halves), x rows their N.
constexpr int kWgStepK = 64;
constexpr int kWgStages = 4;
template <int N>
constexpr size_t wg_stage_bytes() {
  return size_t{kTileRows + N} * 128;
}
template <int N>
constexpr size_t wg_smem_bytes() {
  return kWgStages * wg_stage_bytes<N>() + 1024;  // + the slack that aligns the stages to 1024 bytes
}
static_assert(kTileRows == 128 && kThreads == 128, "the wgmma form is one warpgroup over two m64 halves");

template <bool kXF32, int N>
__global__ void __launch_bounds__(kThreads) skinny_wgmma_kernel(SkinnyGemmParams p, int splits, int steps_per_split) {
#if defined(__CUDA_ARCH__) && !defined(__CUDA_ARCH_FEAT_SM90_ALL)
  __trap();  // wgmma is sm_90a's alone; the launcher takes the mma.sync form elsewhere (launch_x)
#else
  extern __shared__ uint8_t smem_raw[];
  const uint32_t base = static_cast<uint32_t>(__cvta_generic_to_shared(smem_raw));
  uint8_t* smem = smem_raw + ((1024u - (base & 1023u)) & 1023u);
  const int tid = threadIdx.x;
  const int rank = static_cast<int>(blockIdx.x % static_cast<unsigned>(splits));
  const int64_t tile = blockIdx.x / static_cast<unsigned>(splits);
  const int steps = static_cast<int>(p.k / kWgStepK);
  const int s0 = rank * steps_per_split;
  const int nsteps = std::max(0, std::min(steps, s0 + steps_per_split) - s0);
  const int64_t row0 = tile * kTileRows;
  const int64_t k0 = int64_t{s0} * kWgStepK;

  // Thread t copies chunk t % 8 of rows t / 8 + 16 i (the same swizzled place in each).
  const int chunk = tid & 7, r16 = tid >> 3;
  const uint32_t at = swizzled_chunk(r16, chunk);
  const uint16_t* w = static_cast<const uint16_t*>(p.w);
  const uint16_t* x = static_cast<const uint16_t*>(p.x.ptr);
  auto stage = [&](int j) { return smem + (j % kWgStages) * wg_stage_bytes<N>(); };
  auto issue_w = [&](int j) {
    uint8_t* dst = stage(j) + at;
    const int64_t kk = k0 + int64_t{j} * kWgStepK + chunk * 8;
#pragma unroll
    for (int i = 0; i < kTileRows / 16; ++i)
      cp_async16(dst + i * 16 * 128, w + std::min<int64_t>(row0 + r16 + 16 * i, p.n - 1) * p.k + kk);
  };
  // This thread's place in step j's x tile, and the offset in x of its chunk of x row tile i (rows
  // past m re-read the last one).
  auto x_place = [&](int j, int i) { return stage(j) + kTileRows * 128 + at + i * 16 * 128; };
  auto x_offset = [&](int j, int i) {
    return std::min<int64_t>(r16 + 16 * i, p.m - 1) * p.x.stride + k0 + int64_t{j} * kWgStepK + chunk * 8;
  };
  auto issue_x = [&](int j) {
#pragma unroll
    for (int i = 0; i < N / 16; ++i) cp_async16(x_place(j, i), x + x_offset(j, i));
  };
  X8<true> xf[kXF32 ? N / 16 : 1];  // f32 x of a step, loaded ahead of its stage
  auto load_xf = [&](int j) {
#pragma unroll
    for (int i = 0; i < (kXF32 ? N / 16 : 0); ++i) xf[i].load(p.x.ptr, x_offset(j, i));
  };
  auto store_xf = [&](int j) {
#pragma unroll
    for (int i = 0; i < (kXF32 ? N / 16 : 0); ++i) *reinterpret_cast<uint4*>(x_place(j, i)) = xf[i].pairs();
  };
  // The weights of the first steps are in flight before the predecessor (which writes x) finishes;
  // they join the first commit group.
#pragma unroll
  for (int j = 0; j < kWgStages - 1; ++j)
    if (j < nsteps) issue_w(j);
  pdl_begin();
#pragma unroll
  for (int j = 0; j < kWgStages - 1; ++j) {
    if (j < nsteps) {
      if constexpr (kXF32) {
        load_xf(j);
        store_xf(j);
      } else {
        issue_x(j);
      }
    }
    cp_async_commit();
  }
  if (kXF32 && kWgStages - 1 < nsteps) load_xf(kWgStages - 1);

  float acc[2][N / 2];
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < N / 2; ++i) acc[h][i] = 0.f;
  for (int j = 0; j < nsteps; ++j) {
    cp_async_wait<kWgStages - 2>();  // this thread's copies of step j have landed
    fence_proxy_async();             // ... are visible to the tensor cores
    __syncthreads();                 // ... and every thread's; step j-1's products are done
    if (j + kWgStages - 1 < nsteps) {  // into the stage step j-1 used
      issue_w(j + kWgStages - 1);
      if constexpr (kXF32) store_xf(j + kWgStages - 1);  // loaded during step j-1
      else issue_x(j + kWgStages - 1);
    }
    cp_async_commit();
    if (kXF32 && j + kWgStages < nsteps) load_xf(j + kWgStages);
    const uint8_t* st = stage(j);
    wgmma_hold(acc[0]);
    wgmma_hold(acc[1]);
    wgmma_fence();
#pragma unroll
    for (int s = 0; s < kWgStepK / 16; ++s) {
      const uint64_t b = wgmma_desc(st + kTileRows * 128 + 32 * s);
      wgmma_bf16(acc[0], wgmma_desc(st + 32 * s), b);
      wgmma_bf16(acc[1], wgmma_desc(st + 64 * 128 + 32 * s), b);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_hold(acc[0]);
    wgmma_hold(acc[1]);
  }

  // The partial tile, [x row][weight row], in the stages' memory.
  cp_async_wait<0>();
  __syncthreads();
  float* part = reinterpret_cast<float*>(smem);
  const int warp = tid >> 5, g = (tid & 31) >> 2, q = tid & 3;
#pragma unroll
  for (int h = 0; h < 2; ++h)
#pragma unroll
    for (int i = 0; i < N / 8; ++i) {
      const int r = 64 * h + 16 * warp + g, c = 8 * i + 2 * q;
      if (c < p.m) {
        part[c * kLd + r] = acc[h][4 * i];
        part[c * kLd + r + 8] = acc[h][4 * i + 2];
      }
      if (c + 1 < p.m) {
        part[(c + 1) * kLd + r] = acc[h][4 * i + 1];
        part[(c + 1) * kLd + r + 8] = acc[h][4 * i + 3];
      }
    }
  store_cluster_sum(p, part, tile, rank, splits);
#endif
}

// The cluster size. Tiles that fill the device's resident slots on their own are not split (every
// block streams all of k). Otherwise the size whose blocks (tiles x c) fill one wave of slots
// best, the smaller on a tie: several waves of blocks with a few steps each pay the pipeline's
// ramp and the cluster's reduction once a wave (measured: the LM head at 3 rows ran 2.5x slower
// split into whole waves than unsplit).
int choose_splits(const void* kernel, size_t smem, int64_t tiles, int64_t steps) {
  if (tiles >= resident_blocks(kernel, kThreads, smem)) return 1;
  int best = 1;
  int64_t best_blocks = tiles;
  for (int c = 2; c <= kMaxSplits && c <= steps; ++c) {
    const int64_t blocks = tiles * c;
    if (blocks <= resident_blocks(kernel, kThreads, smem, c) && blocks > best_blocks) {
      best_blocks = blocks;
      best = c;
    }
  }
  return best;
}

// Either form over (row tiles x splits) blocks, k in steps of step_k split between a cluster's
// blocks (the attributes set once a kernel).
template <auto kernel>
void launch_form(size_t smem, int step_k, const SkinnyGemmParams& p, cudaStream_t stream) {
  const bool clusters = device_target().sm90_features;
  if (Status s = allow_shared_memory(reinterpret_cast<const void*>(kernel), static_cast<int64_t>(smem), "skinny_gemm");
      !s.ok()) {
    refused_launch() = std::move(s);
    return;
  }
  static const cudaError_t attr =
      clusters ? cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) : cudaSuccess;
  (void)attr;  // a failure surfaces as the launch's error
  const int steps = static_cast<int>(p.k / step_k);
  const int64_t tiles = (p.n + kTileRows - 1) / kTileRows;
  // Clusters are sm_90's: elsewhere every block streams all of k.
  const int splits = !clusters ? 1
                     : p.splits > 0           ? p.splits
                                              : choose_splits(reinterpret_cast<const void*>(kernel), smem, tiles, steps);
  const int steps_per_split = (steps + splits - 1) / splits;
  launch_pdl_cluster(kernel, dim3(static_cast<unsigned>(tiles * splits)), dim3(kThreads), smem, stream,
                     static_cast<unsigned>(splits), p, splits, steps_per_split);
}

template <bool kXF32, int NT>
void launch_nt(const SkinnyGemmParams& p, cudaStream_t stream) {
  launch_form<skinny_gemm_kernel<kXF32, NT>>(kSmemBytes, kStepK, p, stream);
}

template <bool kXF32, int N>
void launch_wgmma(const SkinnyGemmParams& p, cudaStream_t stream) {
  launch_form<skinny_wgmma_kernel<kXF32, N>>(wg_smem_bytes<N>(), kWgStepK, p, stream);
}

template <bool kXF32>
void launch_x(const SkinnyGemmParams& p, cudaStream_t stream) {
  if (p.wgmma && device_target().sm90_features) {
    launch_census().sm90_launches.fetch_add(1, std::memory_order_relaxed);
    if (p.m <= 16) launch_wgmma<kXF32, 16>(p, stream);
    else if (p.m <= 32) launch_wgmma<kXF32, 32>(p, stream);
    else launch_wgmma<kXF32, 64>(p, stream);
    return;
  }
  switch ((p.m + 7) / 8) {
    case 1: launch_nt<kXF32, 1>(p, stream); break;
    case 2: launch_nt<kXF32, 2>(p, stream); break;
    case 3: launch_nt<kXF32, 3>(p, stream); break;
    case 4: launch_nt<kXF32, 4>(p, stream); break;
    case 5: launch_nt<kXF32, 5>(p, stream); break;
    case 6: launch_nt<kXF32, 6>(p, stream); break;
    case 7: launch_nt<kXF32, 7>(p, stream); break;
    default: launch_nt<kXF32, 8>(p, stream); break;
  }
}

}  // namespace

bool skinny_gemm_applies(const SkinnyGemmParams& p) {
  auto aligned16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  if (p.m < 1 || p.m > kSkinnyMaxM || p.n < 1 || p.k < kStepK || p.k % kStepK != 0) return false;  // k % 128
  if (p.k / kStepK > 0x7fffffff || (p.n + kTileRows - 1) / kTileRows * kMaxSplits > 0x7fffffff) return false;
  if (p.w_dtype != DType::kBF16) return false;
  if (p.x_dtype != DType::kF32 && p.x_dtype != DType::kBF16) return false;
  const int64_t x_align = p.x_dtype == DType::kF32 ? 4 : 8;  // elements in 16 bytes
  if (!aligned16(p.w) || !aligned16(p.x.ptr) || (p.m > 1 && p.x.stride % x_align != 0)) return false;
  if (p.out.ptr == nullptr || (p.m > 1 && p.out.stride < p.n)) return false;
  return p.splits >= 0 && p.splits <= kMaxSplits;
}

bool skinny_beats_cublaslt(int64_t m, int64_t n) {
  // Up to 16 rows, every projection but the LM head (which cuBLASLt streams at ~4 TB/s). Past 16
  // rows the kernel bench still has it ahead on most shapes, but whole decode steps measured slower
  // with it (`kiln bench`, 32 and 64 rows: docs/decisions.md, "The skinny GEMM takes 9-16 rows, not 64").
  return m <= 16 && n <= 16384;
}

Status skinny_gemm(const SkinnyGemmParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "m=" + std::to_string(p.m) + " n=" + std::to_string(p.n) + " k=" + std::to_string(p.k) +
           " x=" + std::string(dtype_name(p.x_dtype)) + " splits=" + std::to_string(p.splits) + (p.wgmma ? " wgmma" : " mma.sync");
  };
  if (!skinny_gemm_applies(p)) return invalid_argument("skinny_gemm_kernel: unsupported arguments (" + shape() + ")");
  if (p.x_dtype == DType::kF32) launch_x<true>(p, stream);
  else launch_x<false>(p, stream);
  return launch_status("skinny_gemm_kernel", shape, stream);
}

}  // namespace kiln::cuda
