#version 450
// out[m, n] (+)= x[m, k] w[n, k]^T for m past the GEMV's rows: each workgroup computes a 64 x 64
// tile of out, stepping through k 16 columns at a time. Each step stages the x and w tiles in
// shared memory (w widened to f32 as it loads, zeros past the edges), then every invocation
// accumulates a 4 x 4 block of the tile in registers, in f32. An invocation's block is rows
// ty + 16 i and columns tx + 16 j: neighbouring invocations write neighbouring columns of out.
// x and out rows may be strided; w is contiguous. Row bases are 64-bit addresses (advance), so
// only indices within a row are 32-bit. Split over k (gl_NumWorkGroups.z > 1), workgroup z takes
// k_chunk columns of k from z * k_chunk and writes its partial product to out's z-th [m, n] block
// (splitk_reduce.comp adds them).
#include "common.glsl"

layout(constant_id = 0) const uint W_DTYPE = DTYPE_F32;  // the weight's dtype (core/dtype.h)

const uint BM = 64u, BN = 64u, BK = 16u;  // the tile: rows of out (x), columns of out (w), k step
const uint T = 16u;                       // invocations along each side of the tile
const uint LOADS = BM * BK / (T * T);     // elements each invocation stages per step, of x and of w
layout(local_size_x = 16, local_size_y = 16) in;

layout(push_constant) uniform P {
  uint64_t x, w, out_;
  uint m, n, k, x_stride, out_stride, accumulate, tiles_n, k_chunk;
} p;

// Transposed (k-major) and padded by one column: the staging writes, which run along k, fall in
// different banks, and the block reads along m and n are contiguous.
shared float xs[BK][BM + 1];
shared float ws[BK][BN + 1];

void main() {
  const uint tile = flat_group();
  if (tile >= ((p.m + BM - 1u) / BM) * p.tiles_n) return;  // the grid's rounding (whole workgroups)
  const uint m0 = (tile / p.tiles_n) * BM, n0 = (tile % p.tiles_n) * BN;
  const uint tx = gl_LocalInvocationID.x, ty = gl_LocalInvocationID.y;
  const uint tid = ty * T + tx;

  // What this invocation stages each step: column lk of rows lr + (T * T / BK) * i of each tile.
  const uint lk = tid % BK, lr = tid / BK;
  uint64_t xrow[LOADS], wrow[LOADS];
  for (uint i = 0u; i < LOADS; ++i) {
    const uint r = lr + (T * T / BK) * i;
    xrow[i] = advance(p.x, uint64_t(m0 + r) * p.x_stride, DTYPE_F32);
    wrow[i] = advance(p.w, uint64_t(n0 + r) * p.k, W_DTYPE);
  }

  float acc[4][4];
  for (uint i = 0u; i < 4u; ++i)
    for (uint j = 0u; j < 4u; ++j) acc[i][j] = 0.0;

  const uint k_begin = gl_WorkGroupID.z * p.k_chunk, k_end = min(p.k, k_begin + p.k_chunk);
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    const uint kk = k0 + lk;
    for (uint i = 0u; i < LOADS; ++i) {
      const uint r = lr + (T * T / BK) * i;
      xs[lk][r] = (m0 + r < p.m && kk < k_end) ? F32(xrow[i]).v[kk] : 0.0;
      ws[lk][r] = (n0 + r < p.n && kk < k_end) ? load(wrow[i], kk, W_DTYPE) : 0.0;
    }
    barrier();
    for (uint s = 0u; s < BK; ++s) {
      float a[4], b[4];
      for (uint i = 0u; i < 4u; ++i) a[i] = xs[s][ty + T * i];
      for (uint j = 0u; j < 4u; ++j) b[j] = ws[s][tx + T * j];
      for (uint i = 0u; i < 4u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = fma(a[i], b[j], acc[i][j]);
    }
    barrier();
  }

  for (uint i = 0u; i < 4u; ++i) {
    const uint row = m0 + ty + T * i;
    if (row >= p.m) break;
    F32 o = F32(advance(p.out_, (uint64_t(gl_WorkGroupID.z) * p.m + row) * p.out_stride, DTYPE_F32));
    for (uint j = 0u; j < 4u; ++j) {
      const uint col = n0 + tx + T * j;
      if (col < p.n) o.v[col] = p.accumulate != 0u ? o.v[col] + acc[i][j] : acc[i][j];
    }
  }
}
