#version 450
// The index of each row's largest logit: the first on ties, NaN never wins (a row of NaN gives 0),
// as the CPU reference. One workgroup a row.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t logits, ids;
  uint vocab, stride;
} p;

shared float best_v[256];
shared uint best_i[256];

const uint NONE = 0xffffffffu;

// (v, i) beats (bv, bi): larger, or equal and earlier (NONE is later than every index).
bool beats(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void main() {
  const uint row = flat_group(), lid = gl_LocalInvocationID.x;
  float bv = -1.0 / 0.0;
  uint bi = NONE;
  for (uint j = lid; j < p.vocab; j += 256u) {
    const float v = F32(p.logits).v[row * p.stride + j];
    if (beats(v, j, bv, bi)) bv = v, bi = j;
  }
  best_v[lid] = bv;
  best_i[lid] = bi;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (lid < s && beats(best_v[lid + s], best_i[lid + s], best_v[lid], best_i[lid])) {
      best_v[lid] = best_v[lid + s];
      best_i[lid] = best_i[lid + s];
    }
    barrier();
  }
  if (lid == 0u) I32(p.ids).v[row] = best_i[0] == NONE ? 0 : int(best_i[0]);
}
