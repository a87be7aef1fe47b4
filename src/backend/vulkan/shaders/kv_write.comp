#version 450
// New K and V rows ([tokens, kv_heads, head_dim], strided) into the paged f32 caches, whose
// token slots are rows of kv_heads * head_dim: token t goes to slot slot_mapping[t]. A slot
// outside [0, slots) is skipped (a padding token; reading the mapping back to refuse it would
// cost the host a synchronisation). One invocation an element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t k, v, k_cache, v_cache, slot_mapping;
  uint tokens, kv_heads, head_dim, slots, k_stride0, k_stride1, v_stride0, v_stride1;
} p;

void main() {
  const uint row = p.kv_heads * p.head_dim;
  const uint i = flat_group() * 256u + gl_LocalInvocationID.x;
  if (i >= p.tokens * row) return;
  const uint t = i / row, within = i % row, h = within / p.head_dim, e = within % p.head_dim;
  const int slot = I32(p.slot_mapping).v[t];
  if (slot < 0 || uint(slot) >= p.slots) return;
  const uint64_t dst = uint64_t(slot) * row + within;
  F32(advance(p.k_cache, dst, DTYPE_F32)).v[0] =
      F32(advance(p.k, uint64_t(t) * p.k_stride0 + uint64_t(h) * p.k_stride1, DTYPE_F32)).v[e];
  F32(advance(p.v_cache, dst, DTYPE_F32)).v[0] =
      F32(advance(p.v, uint64_t(t) * p.v_stride0 + uint64_t(h) * p.v_stride1, DTYPE_F32)).v[e];
}
