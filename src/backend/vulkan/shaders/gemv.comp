#version 450
// out[m, n] (+)= x[m, k] w[n, k]^T for decode-sized m (M rows, up to 8): the weights are read
// once for all rows of x. Each workgroup takes R consecutive rows of w (columns of out); its
// invocations stride over k, each keeping M x R partial sums in registers, which a tree in shared
// memory then adds up. With PAIRS (16-bit weights, k even, w 4-byte aligned) each invocation
// reads two weights per 32-bit load. x and out rows may be strided; w is contiguous.
#include "common.glsl"

layout(constant_id = 0) const uint W_DTYPE = DTYPE_F32;  // the weight's dtype (core/dtype.h)
layout(constant_id = 1) const uint M = 1u;               // rows of x, 1..8
layout(constant_id = 2) const uint PAIRS = 0u;           // 1: 16-bit weights read two at a time

layout(buffer_reference, std430, buffer_reference_align = 4) buffer U32 { uint v[]; };

const uint WG = 128u;  // invocations
const uint R = 4u;     // rows of w a workgroup
layout(local_size_x = 128) in;

layout(push_constant) uniform P {
  uint64_t x, w, out_;
  uint m, n, k, x_stride, out_stride, accumulate;
} p;

shared float red[M * R * WG];  // partial sum v of invocation t at v * WG + t

float widen(uint h) { return W_DTYPE == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h); }

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

  if (PAIRS != 0u) {
    for (uint j = t; j < p.k / 2u; j += WG) {
      vec2 xv[M];
      for (uint i = 0u; i < M; ++i) xv[i] = vec2(F32(xrow[i]).v[2u * j], F32(xrow[i]).v[2u * j + 1u]);
      for (uint r = 0u; r < R; ++r) {
        const uint pair = U32(wrow[r]).v[j];
        const vec2 wv = vec2(widen(pair & 0xffffu), widen(pair >> 16));
        for (uint i = 0u; i < M; ++i) acc[i * R + r] = fma(wv.y, xv[i].y, fma(wv.x, xv[i].x, acc[i * R + r]));
      }
    }
  } else {
    for (uint j = t; j < p.k; j += WG) {
      float xv[M];
      for (uint i = 0u; i < M; ++i) xv[i] = F32(xrow[i]).v[j];
      for (uint r = 0u; r < R; ++r) {
        const float wv = load(wrow[r], j, W_DTYPE);
        for (uint i = 0u; i < M; ++i) acc[i * R + r] = fma(wv, xv[i], acc[i * R + r]);
      }
    }
  }

  for (uint v = 0u; v < M * R; ++v) red[v * WG + t] = acc[v];
  barrier();
  for (uint s = WG / 2u; s > 0u; s >>= 1) {
    if (t < s)
      for (uint v = 0u; v < M * R; ++v) red[v * WG + t] += red[v * WG + t + s];
    barrier();
  }

  if (t < M * R) {
    const uint i = t / R, col = row0 + t % R;
    if (col < p.n) {
      F32 o = F32(advance(p.out_, uint64_t(i) * p.out_stride, DTYPE_F32));
      const float s = red[t * WG];
      o.v[col] = p.accumulate != 0u ? o.v[col] + s : s;
    }
  }
}
