#version 450
// matmul.comp's product on cooperative matrices (GL_NV_cooperative_matrix: 16 x 16 x 16, f16
// inputs, f32 accumulation), for devices that report that shape with 32-invocation subgroups.
// 16-bit weights convert to f16 exactly (bf16's 8 significant bits fit f16's 11 where |w| is
// within f16's normal range; larger ones are held at 65504); x is rounded to f16 once (held
// within +-65504), as a bf16 GEMM rounds it to bf16: the product is within f16 rounding of x.
// Each workgroup (eight subgroups, 4 x 2) computes a BM x 128 tile of out (BM = 64 MT), stepping
// through k 32 columns at a time: the tile's x and w are read with 16-byte loads into registers
// one step ahead, converted and staged in shared memory, then each subgroup multiplies a
// (16 MT) x 64 block of the tile: MT x 4 accumulators. At the end each accumulator passes through a
// 16 x 16 scratch of its subgroup to out, inside its bounds, adding where asked. Split over k as
// matmul.comp is (gl_NumWorkGroups.z > 1). Rows of x and w start 16-byte aligned and k is a
// multiple of 8 (linear.cc sends the rest to matmul.comp).
#include "common.glsl"
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_control_flow_attributes : require

layout(constant_id = 0) const uint W_DTYPE = DTYPE_BF16;  // the weight's dtype (core/dtype.h)
layout(constant_id = 1) const uint MT = 2;                // 16-row accumulators a subgroup: BM = 64 MT

const uint BM = 64u * MT, BN = 128u, BK = 32u;  // the tile: rows of out (x), columns of out (w), k step
const uint PAD = 8u;                            // f16 elements past each staged row (bank spread)
const uint LD = BK + PAD;                       // staged row length
const uint SN = 64u;                            // a subgroup's block: (16 MT) x 64
const uint XV = BM * BK / 4u / 256u;            // vec4s of x an invocation stages a step (MT * 2)
const uint WV = BN * BK / 8u / 256u;            // 8-weight words of w an invocation stages (2)
layout(local_size_x = 256) in;

layout(buffer_reference, std430, buffer_reference_align = 16) buffer X4 { vec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer W8 { uvec4 v[]; };

layout(push_constant) uniform P {
  uint64_t x, w, out_;
  uint m, n, k, x_stride, out_stride, accumulate, tiles_n, k_chunk;
} p;

shared float16_t xs[BM * LD];     // x tile, row-major: xs[r * LD + c]
shared float16_t ws[BN * LD];     // w tile, one row of w (a column of out) per staged row
shared float scratch[8u * 256u];  // a 16 x 16 accumulator of each subgroup on its way out

float16_t half_of(float v) { return float16_t(clamp(v, -65504.0, 65504.0)); }
// Two 16-bit weights of a 32-bit word as f32 (the first in the low half).
vec2 weights_of(uint word) {
  if (W_DTYPE == DTYPE_BF16) return vec2(uintBitsToFloat(word << 16), uintBitsToFloat(word & 0xffff0000u));
  return unpackHalf2x16(word);
}

void main() {
  const uint tile = flat_group();
  if (tile >= ((p.m + BM - 1u) / BM) * p.tiles_n) return;  // the grid's rounding (whole workgroups)
  const uint m0 = (tile / p.tiles_n) * BM, n0 = (tile % p.tiles_n) * BN;
  const uint t = gl_LocalInvocationID.x;
  const uint sg = t / 32u, lane = t % 32u;
  const uint bm = (sg / 2u) * (16u * MT), bn = (sg % 2u) * SN;  // this subgroup's block within the tile

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[MT][4];
  [[unroll]] for (uint i = 0u; i < MT; ++i)
    [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  // Staging: x's vec4 q = t + 256 i is row q / 8, columns (q % 8) * 4 ..; w's word q = t + 256 i
  // is row q / 4, columns (q % 4) * 8 ... Rows past m or n read their last row (never stored out);
  // columns past the split's k read zeros.
  const uint k_begin = gl_WorkGroupID.z * p.k_chunk, k_end = min(p.k, k_begin + p.k_chunk);
  vec4 xr[XV];
  uvec4 wr[WV];
  uint k0 = k_begin;
  [[unroll]] for (uint i = 0u; i < XV; ++i) {
    const uint q = t + 256u * i, r = min(m0 + q / 8u, p.m - 1u), c = k0 + (q % 8u) * 4u;
    xr[i] = c < k_end ? X4(advance(p.x, uint64_t(r) * p.x_stride + c, DTYPE_F32)).v[0] : vec4(0.0);
  }
  [[unroll]] for (uint i = 0u; i < WV; ++i) {
    const uint q = t + 256u * i, r = min(n0 + q / 4u, p.n - 1u), c = k0 + (q % 4u) * 8u;
    wr[i] = c < k_end ? W8(advance(p.w, uint64_t(r) * p.k + c, W_DTYPE)).v[0] : uvec4(0u);
  }

  for (; k0 < k_end; k0 += BK) {
    [[unroll]] for (uint i = 0u; i < XV; ++i) {
      const uint q = t + 256u * i, at = (q / 8u) * LD + (q % 8u) * 4u;
      // Columns past k_end within a vec4 that starts inside it: zero (k is a multiple of 8, a
      // split's k_chunk a multiple of BK, so a vec4 is all inside or all outside).
      [[unroll]] for (uint c = 0u; c < 4u; ++c) xs[at + c] = half_of(xr[i][c]);
    }
    [[unroll]] for (uint i = 0u; i < WV; ++i) {
      const uint q = t + 256u * i, at = (q / 4u) * LD + (q % 4u) * 8u;
      [[unroll]] for (uint c = 0u; c < 4u; ++c) {
        const vec2 pair = weights_of(wr[i][c]);
        ws[at + 2u * c] = half_of(pair.x);
        ws[at + 2u * c + 1u] = half_of(pair.y);
      }
    }
    barrier();
    // The next step's loads, in flight while this step multiplies.
    const uint k1 = k0 + BK;
    if (k1 < k_end) {
      [[unroll]] for (uint i = 0u; i < XV; ++i) {
        const uint q = t + 256u * i, r = min(m0 + q / 8u, p.m - 1u), c = k1 + (q % 8u) * 4u;
        xr[i] = c < k_end ? X4(advance(p.x, uint64_t(r) * p.x_stride + c, DTYPE_F32)).v[0] : vec4(0.0);
      }
      [[unroll]] for (uint i = 0u; i < WV; ++i) {
        const uint q = t + 256u * i, r = min(n0 + q / 4u, p.n - 1u), c = k1 + (q % 4u) * 8u;
        wr[i] = c < k_end ? W8(advance(p.w, uint64_t(r) * p.k + c, W_DTYPE)).v[0] : uvec4(0u);
      }
    }
    [[unroll]] for (uint s = 0u; s < BK; s += 16u) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[MT], b[4];
      [[unroll]] for (uint i = 0u; i < MT; ++i) coopMatLoadNV(a[i], xs, (bm + 16u * i) * LD + s, LD, false);
      // w's staged rows are columns of the k x n operand: column-major with stride LD.
      [[unroll]] for (uint j = 0u; j < 4u; ++j) coopMatLoadNV(b[j], ws, (bn + 16u * j) * LD + s, LD, true);
      [[unroll]] for (uint i = 0u; i < MT; ++i)
        [[unroll]] for (uint j = 0u; j < 4u; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
    }
    barrier();
  }

  [[unroll]] for (uint i = 0u; i < MT; ++i)
    [[unroll]] for (uint j = 0u; j < 4u; ++j) {
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
