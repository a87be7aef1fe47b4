#version 450
// The second pass of split attention (attention.comp): for each (token, query head), the splits'
// records (acc[head_dim], max, sum; `splits` of them, head_dim + 2 floats apart) merged on their
// common max, out = sum of acc * exp(max - M) / sum of sum * exp(max - M), times sigmoid(gate)
// where there is a gate. One workgroup per (token, head); invocations over dims.
#include "common.glsl"
layout(local_size_x = 128) in;
layout(push_constant) uniform P {
  uint64_t partial, gate, out_;
  uint tokens, q_heads, head_dim, splits, g_stride0, g_stride1, o_stride0, o_stride1;
} p;

void main() {
  const uint wg = flat_group(), lid = gl_LocalInvocationID.x, D = p.head_dim;
  const uint t = wg / p.q_heads, h = wg % p.q_heads;
  if (t >= p.tokens) return;
  F32 rec = F32(advance(p.partial, uint64_t(wg) * p.splits * (D + 2u), DTYPE_F32));
  float M = -3.0e38;
  for (uint s = 0u; s < p.splits; ++s) M = max(M, rec.v[s * (D + 2u) + D]);
  float L = 0.0;
  for (uint s = 0u; s < p.splits; ++s) L += rec.v[s * (D + 2u) + D + 1u] * exp(rec.v[s * (D + 2u) + D] - M);
  const float inv = L > 0.0 ? 1.0 / L : 0.0;
  const uint64_t gate_row = uint64_t(t) * p.g_stride0 + uint64_t(h) * p.g_stride1;
  for (uint e = lid; e < D; e += 128u) {
    float y = 0.0;
    for (uint s = 0u; s < p.splits; ++s) y += rec.v[s * (D + 2u) + e] * exp(rec.v[s * (D + 2u) + D] - M);
    y *= inv;
    if (p.gate != 0ul) y /= 1.0 + exp(-F32(advance(p.gate, gate_row, DTYPE_F32)).v[e]);
    F32(advance(p.out_, uint64_t(t) * p.o_stride0 + uint64_t(h) * p.o_stride1, DTYPE_F32)).v[e] = y;
  }
}
