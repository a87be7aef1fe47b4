#version 450
// gemv.comp's product for 16-bit weights with 16-byte rows: out[m, n] (+)= x[m, k] w[n, k]^T for
// decode-sized m (M rows, up to 8), k a multiple of 8, w and x 16-byte aligned (x rows too). Each
// invocation reads eight weights of each of the workgroup's R rows per 16-byte load and keeps M x
// R partial sums; subgroup sums, then one shared-memory pass across subgroups, add them up.
#include "common.glsl"
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require

layout(constant_id = 0) const uint W_DTYPE = DTYPE_BF16;  // bf16 or f16
layout(constant_id = 1) const uint M = 1u;                // rows of x, 1..8

layout(buffer_reference, std430, buffer_reference_align = 16) buffer Words { uvec4 v[]; };
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Vec4 { vec4 v[]; };

const uint WG = 128u;  // invocations
const uint R = 4u;     // rows of w a workgroup
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
  uint64_t x, w, out_;
  uint m, n, k, x_stride, out_stride, accumulate;
} p;

shared float red[M * R * WG];  // the sum v of subgroup s at s * M * R + v

vec2 widen2(uint pair) {
  return W_DTYPE == DTYPE_BF16 ? vec2(bf16_to_f32(pair & 0xffffu), bf16_to_f32(pair >> 16)) : unpackHalf2x16(pair);
}

void main() {
  const uint row0 = flat_group() * R;
  if (row0 >= p.n) return;  // the grid's rounding (whole workgroups)
  const uint t = gl_LocalInvocationID.x;

  // Rows past n read row n - 1 (in bounds); their sums are dropped.
  uint64_t wrow[R];
  for (uint r = 0u; r < R; ++r) wrow[r] = advance(p.w, uint64_t(min(row0 + r, p.n - 1u)) * p.k, W_DTYPE);
  uint64_t xrow[M];
  for (uint i = 0u; i < M; ++i) xrow[i] = advance(p.x, uint64_t(i) * p.x_stride, DTYPE_F32);

  float acc[M * R];
  for (uint v = 0u; v < M * R; ++v) acc[v] = 0.0;

  for (uint j = t; j < p.k / 8u; j += WG) {
    vec4 wa[R], wb[R];
    for (uint r = 0u; r < R; ++r) {
      const uvec4 q = Words(wrow[r]).v[j];
      wa[r] = vec4(widen2(q.x), widen2(q.y));
      wb[r] = vec4(widen2(q.z), widen2(q.w));
    }
    for (uint i = 0u; i < M; ++i) {
      const vec4 xa = Vec4(xrow[i]).v[2u * j], xb = Vec4(xrow[i]).v[2u * j + 1u];
      for (uint r = 0u; r < R; ++r) acc[i * R + r] += dot(wa[r], xa) + dot(wb[r], xb);
    }
  }

  for (uint v = 0u; v < M * R; ++v) {
    const float s = subgroupAdd(acc[v]);
    if (subgroupElect()) red[gl_SubgroupID * M * R + v] = s;
  }
  barrier();
  if (t < M * R) {
    float s = 0.0;
    for (uint g = 0u; g < gl_NumSubgroups; ++g) s += red[g * M * R + t];
    const uint i = t / R, col = row0 + t % R;
    if (col < p.n) {
      F32 o = F32(advance(p.out_, uint64_t(i) * p.out_stride, DTYPE_F32));
      o.v[col] = p.accumulate != 0u ? o.v[col] + s : s;
    }
  }
}
