#version 450
// Rotary embedding in place on strided q and k ([tokens, heads, head_dim], unit-stride rows), one
// workgroup a token: the leading rotary_dim dims of each head rotate "rotate half" (dims i and
// i + half by the angle float(position) * inv_freq[i]), as the CPU reference. inv_freq comes from
// the host (f32 values of a double power, which a shader's f32 pow would miss by ulps that a
// position of 10^5 turns into a wrong angle); sin and cos are this file's own (the builtins may
// be off by 2^-11, and by far more past [-pi, pi]).
#include "common.glsl"
layout(local_size_x = 128) in;
layout(push_constant) uniform P {
  uint64_t q, k, positions, inv_freq;
  uint tokens, q_heads, kv_heads, half_, q_stride0, q_stride1, k_stride0, k_stride1;
} p;

const uint MAX_HALF = 256;
shared float cos_s[MAX_HALF], sin_s[MAX_HALF];

// sin and cos of a (|a| below 2^19 * pi/2, about 8e5) within about an f32 ulp of 1: a minus
// j * pi/2 exactly (Cody-Waite: pi/2 in chunks of 5 significant bits, each product with j < 2^19
// exact), then the Cephes polynomials on [-pi/4, pi/4] and the quadrant j mod 4.
vec2 sin_cos(float a) {
  const float TWO_OVER_PI = 0.636619772367581343;
  precise float j = floor(a * TWO_OVER_PI + 0.5);
  precise float r = a - j * 1.5625;
  r = r - j * 0.0078125;
  r = r - j * 0.0004730224609375;
  r = r - j * 0.00001049041748046875;
  r = r - j * 0.00000031292438507080078125;
  r = r - j * 9.92093629470503e-10;
  precise float z = r * r;
  precise float s = ((-1.9515295891e-4 * z + 8.3321608736e-3) * z - 1.6666654611e-1) * z * r + r;
  precise float c = ((2.443315711809948e-5 * z - 1.388731625493765e-3) * z + 4.166664568298827e-2) * z * z -
                    0.5 * z + 1.0;
  const uint quadrant = uint(int(j)) & 3u;
  if (quadrant == 0u) return vec2(s, c);
  if (quadrant == 1u) return vec2(c, -s);
  if (quadrant == 2u) return vec2(-s, -c);
  return vec2(-c, s);
}

void main() {
  const uint t = flat_group(), lid = gl_LocalInvocationID.x;
  if (t >= p.tokens) return;
  const float pos = float(I32(p.positions).v[t]);
  for (uint i = lid; i < p.half_; i += 128u) {
    precise float angle = pos * F32(p.inv_freq).v[i];
    const vec2 sc = sin_cos(angle);
    sin_s[i] = sc.x;
    cos_s[i] = sc.y;
  }
  barrier();
  const uint heads = p.q_heads + p.kv_heads;
  for (uint idx = lid; idx < heads * p.half_; idx += 128u) {
    const uint h = idx / p.half_, i = idx % p.half_;
    const bool is_q = h < p.q_heads;
    const uint64_t elem = is_q ? uint64_t(t) * p.q_stride0 + uint64_t(h) * p.q_stride1
                               : uint64_t(t) * p.k_stride0 + uint64_t(h - p.q_heads) * p.k_stride1;
    F32 v = F32(advance(is_q ? p.q : p.k, elem, DTYPE_F32));
    const float x1 = v.v[i], x2 = v.v[i + p.half_], c = cos_s[i], s = sin_s[i];
    v.v[i] = x1 * c - x2 * s;
    v.v[i + p.half_] = x2 * c + x1 * s;
  }
}
