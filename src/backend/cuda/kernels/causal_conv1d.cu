#include "backend/cuda/kernels/causal_conv1d.h"
#include "backend/cuda/kernels/launch.h"
#include "backend/cuda/kernels/pdl.cuh"

namespace kiln::cuda {

namespace {

constexpr int kThreads = 128;
constexpr int kTokenTile = 16;  // >= kConvMaxKernel - 1: only a row's first tile reads its state
static_assert(kTokenTile >= kConvMaxKernel - 1);

// Grid: (channel blocks, token tiles, rows). The conv is not a recurrence: token t needs only
// the inputs t-K+1 .. t, so tiles of a row run in parallel. The inputs before the row come from
// its state, read by the first tile alone; that tile also writes the new state (the row's last
// K-1 inputs), so no other thread can see it half-updated.
template <int K>
__global__ void causal_conv1d_kernel(CausalConv1dParams p) {
  pdl_begin();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t row = blockIdx.z;
  if (c >= p.channels) return;
  const int64_t slot = p.state_slots[row];
  if (slot < 0 || slot >= p.slots) return;
  const int64_t t0 = p.cu_seqlens[row], t1 = p.cu_seqlens[row + 1];
  const int64_t ts = t0 + static_cast<int64_t>(blockIdx.y) * kTokenTile;
  if (ts >= t1) return;
  const int64_t te = ts + kTokenTile < t1 ? ts + kTokenTile : t1;
  const int64_t C = p.channels;
  float* st = p.state + slot * (K - 1) * C + c;
  float w[K], win[K], old[K - 1];
#pragma unroll
  for (int k = 0; k < K; ++k) w[k] = p.weight.row(c)[k];
  const bool first = blockIdx.y == 0;
#pragma unroll
  for (int k = 0; k < K - 1; ++k) {
    const int64_t tt = ts - (K - 1) + k;
    old[k] = first ? st[k * C] : 0.f;
    win[k] = tt >= t0 ? p.x.row(tt)[c] : old[k];  // tt < t0 only in the first tile (ts = t0)
  }
  auto step = [&](float input, int64_t t) {  // token t's output; the window moves on by one
    win[K - 1] = input;
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < K; ++k) acc += w[k] * win[k];
    p.out.row(t)[c] = acc / (1.f + expf(-acc));
#pragma unroll
    for (int k = 0; k < K - 1; ++k) win[k] = win[k + 1];
  };
  if (te - ts == kTokenTile) {  // a whole tile: its inputs loaded at once, all in flight
    float in[kTokenTile];
#pragma unroll
    for (int i = 0; i < kTokenTile; ++i) in[i] = p.x.row(ts + i)[c];
#pragma unroll
    for (int i = 0; i < kTokenTile; ++i) step(in[i], ts + i);
  } else {
    for (int64_t t = ts; t < te; ++t) step(p.x.row(t)[c], t);
  }
  if (!first) return;
  // New state: the inputs t1-K+1 .. t1-1, from the old state where the row is shorter than K-1.
  const int64_t n = t1 - t0;
#pragma unroll
  for (int k = 0; k < K - 1; ++k) {
    const int64_t tt = t1 - (K - 1) + k;
    float v = 0.f;
    if (tt >= t0) {
      v = p.x.row(tt)[c];
    } else {
#pragma unroll
      for (int m = 0; m < K - 1; ++m)
        if (m == k + n) v = old[m];  // old[k + n], without a run-time register index
    }
    st[k * C] = v;
  }
}

template <int K>
void launch(const CausalConv1dParams& p, cudaStream_t stream) {
  dim3 grid(grid_blocks(p.channels, kThreads, 0x7fffffff),
            static_cast<unsigned>((p.max_row_tokens + kTokenTile - 1) / kTokenTile), static_cast<unsigned>(p.rows));
  launch_pdl(causal_conv1d_kernel<K>, grid, kThreads, 0, stream, p);
}

}  // namespace

Status causal_conv1d(const CausalConv1dParams& p, cudaStream_t stream) {
  auto shape = [&] {
    return "rows=" + std::to_string(p.rows) + " tokens=" + std::to_string(p.tokens) + " channels=" +
           std::to_string(p.channels) + " kernel=" + std::to_string(p.kernel);
  };
  if (p.rows == 0 || p.channels == 0) return {};
  if (p.rows > 65535) return invalid_argument("causal_conv1d_kernel: more than 65535 rows (" + shape() + ")");
  if (p.max_row_tokens > int64_t{65535} * kTokenTile)
    return invalid_argument("causal_conv1d_kernel: a row of more than 1048560 tokens (" + shape() + ")");
  switch (p.kernel) {
    case 2: launch<2>(p, stream); break;
    case 3: launch<3>(p, stream); break;
    case 4: launch<4>(p, stream); break;
    case 5: launch<5>(p, stream); break;
    case 6: launch<6>(p, stream); break;
    case 7: launch<7>(p, stream); break;
    case 8: launch<8>(p, stream); break;
    default: return invalid_argument("causal_conv1d_kernel: kernel width must be 2..8 (" + shape() + ")");
  }
  return launch_status("causal_conv1d_kernel", shape, stream);
}

}  // namespace kiln::cuda
