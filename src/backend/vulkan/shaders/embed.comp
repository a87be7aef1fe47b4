#version 450
// Embedding gather: out[t, :] = table[ids[t], :] widened to f32 (zeros for an id outside the
// table: never a read past it). One invocation an element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t ids, table, out_;
  uint tokens, width, table_stride, out_stride, dtype, vocab;
} p;

void main() {
  const uint i = flat_group() * 256u + gl_LocalInvocationID.x;
  if (i >= p.tokens * p.width) return;
  const uint t = i / p.width, c = i % p.width;
  const uint id = uint(I32(p.ids).v[t]);  // negative ids wrap past vocab
  F32(p.out_).v[t * p.out_stride + c] =
      id < p.vocab ? load(advance(p.table, uint64_t(id) * p.table_stride, p.dtype), c, p.dtype) : 0.0;
}
