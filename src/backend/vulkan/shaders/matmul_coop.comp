#version 450
// matmul.comp's product on cooperative matrices (GL_NV_cooperative_matrix: 16 x 16 x 16, f16
// inputs, f32 accumulation), for devices that report that shape with 32-invocation subgroups.
// 16-bit weights convert to f16 exactly (bf16's 8 significant bits fit f16's 11 where |w| is
// within f16's normal range; larger ones are held at 65504), and each x splits into two f16 parts, x = hi + lo, multiplied
// separately: the product keeps about 22 of x's 24 significant bits, so it matches the f32 path
// to its rounding (|x| is held below 65504, f16's largest value).
// Each workgroup (eight subgroups) computes a 128 x 128 tile of out, stepping through k 32
// columns at a time: the x parts and the w tile are staged in shared memory (zeros past the
// edges), then each subgroup multiplies a 32 x 64 block of the tile: 2 x 4 accumulators. At the
// end each accumulator passes through a 16 x 16 scratch of its subgroup to out, inside its
// bounds, adding where asked. Split over k as matmul.comp is (gl_NumWorkGroups.z > 1).
#include "common.glsl"
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require

layout(constant_id = 0) const uint W_DTYPE = DTYPE_BF16;  // the weight's dtype (core/dtype.h)

const uint BM = 128u, BN = 128u, BK = 32u;  // the tile: rows of out (x), columns of out (w), k step
const uint PAD = 8u;                        // f16 elements past each staged row (bank spread)
const uint LD = BK + PAD;                   // staged row length
const uint WG = 256u;                       // invocations: 8 subgroups of 32
const uint SM = 32u, SN = 64u;              // a subgroup's block: 2 x 4 matrices of 16 x 16
layout(local_size_x = 256) in;

layout(push_constant) uniform P {
  uint64_t x, w, out_;
  uint m, n, k, x_stride, out_stride, accumulate, tiles_n, k_chunk;
} p;

shared float16_t xh[BM * LD];      // x tile's high parts, row-major: xh[r * LD + c]
shared float16_t xl[BM * LD];      // and its low parts
shared float16_t ws[BN * LD];      // w tile, one row of w (a column of out) per staged row
shared float scratch[8u * 256u];   // a 16 x 16 accumulator of each subgroup on its way out


void main() {
  const uint tile = flat_group();
  if (tile >= ((p.m + BM - 1u) / BM) * p.tiles_n) return;  // the grid's rounding (whole workgroups)
  const uint m0 = (tile / p.tiles_n) * BM, n0 = (tile % p.tiles_n) * BN;
  const uint t = gl_LocalInvocationID.x;
  const uint sg = t / 32u, lane = t % 32u;
  const uint bm = (sg / 2u) * SM, bn = (sg % 2u) * SN;  // this subgroup's block within the tile

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[2][4];
  for (uint i = 0u; i < 2u; ++i)
    for (uint j = 0u; j < 4u; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  // Staging: each invocation fills 16 elements of each tile a step, a row's 16 consecutive ks
  // (rows t / 2, columns (t % 2) * 16 onwards).
  const uint sr = t / 2u, sc = (t % 2u) * 16u;
  const bool x_in = m0 + sr < p.m, w_in = n0 + sr < p.n;
  const uint64_t xrow = advance(p.x, uint64_t(min(m0 + sr, p.m - 1u)) * p.x_stride, DTYPE_F32);
  const uint64_t wrow = advance(p.w, uint64_t(min(n0 + sr, p.n - 1u)) * p.k, W_DTYPE);

  const uint k_begin = gl_WorkGroupID.z * p.k_chunk, k_end = min(p.k, k_begin + p.k_chunk);
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    for (uint c = 0u; c < 16u; ++c) {
      const uint kk = k0 + sc + c;
      const bool in_k = kk < k_end;
      const float v = (x_in && in_k) ? clamp(F32(xrow).v[kk], -65504.0, 65504.0) : 0.0;
      const float16_t hi = float16_t(v);
      xh[sr * LD + sc + c] = hi;
      xl[sr * LD + sc + c] = float16_t(v - float(hi));
      ws[sr * LD + sc + c] = (w_in && in_k) ? float16_t(clamp(load(wrow, kk, W_DTYPE), -65504.0, 65504.0)) : float16_t(0.0);
    }
    barrier();
    for (uint s = 0u; s < BK; s += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[2], b[4];
      for (uint i = 0u; i < 2u; ++i) coopMatLoadNV(a[i], xl, (bm + 16u * i) * LD + s, LD, false);
      // w's staged rows are columns of the k x n operand: column-major with stride LD.
      for (uint j = 0u; j < 4u; ++j) coopMatLoadNV(b[j], ws, (bn + 16u * j) * LD + s, LD, true);
      for (uint i = 0u; i < 2u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
      for (uint i = 0u; i < 2u; ++i) coopMatLoadNV(a[i], xh, (bm + 16u * i) * LD + s, LD, false);
      for (uint i = 0u; i < 2u; ++i)
        for (uint j = 0u; j < 4u; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
    }
    barrier();
  }

  for (uint i = 0u; i < 2u; ++i)
    for (uint j = 0u; j < 4u; ++j) {
      coopMatStoreNV(acc[i][j], scratch, sg * 256u, 16u, false);
      subgroupMemoryBarrierShared();
      subgroupBarrier();
      for (uint e = lane; e < 256u; e += 32u) {
        const uint row = m0 + bm + 16u * i + e / 16u, col = n0 + bn + 16u * j + e % 16u;
        if (row < p.m && col < p.n) {
          F32 o = F32(advance(p.out_, (uint64_t(gl_WorkGroupID.z) * p.m + row) * p.out_stride, DTYPE_F32));
          const float v = scratch[sg * 256u + e];
          o.v[col] = p.accumulate != 0u ? o.v[col] + v : v;
        }
      }
      subgroupBarrier();
    }
}
