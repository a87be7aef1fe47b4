#version 450
// The index of each row's largest logit: the first on ties, NaN never wins (a row of NaN gives 0),
// as the CPU reference. A structured-output row takes its largest allowed logit: `masks` (0: no
// row has one) holds each row's first mask word (NONE: every id allowed), then the words (bit
// id % 32 of word id / 32, after the rows' entries). One workgroup a row.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t logits, ids, masks;
  uint vocab, stride, rows;
} p;
layout(buffer_reference, std430, buffer_reference_align = 4) readonly buffer Masks { uint w[]; };

shared float best_v[256];
shared uint best_i[256];

const uint NONE = 0xffffffffu;

// (v, i) beats (bv, bi): larger, or equal and earlier (NONE is later than every index).
bool beats(float v, uint i, float bv, uint bi) { return v > bv || (v == bv && i < bi); }

void main() {
  const uint row = flat_group(), lid = gl_LocalInvocationID.x;
  if (row >= p.rows) return;
  const uint mask = p.masks != 0ul ? Masks(p.masks).w[row] : NONE;
  float bv = -1.0 / 0.0;
  uint bi = NONE;
  for (uint j = lid; j < p.vocab; j += 256u) {
    if (mask != NONE && ((Masks(p.masks).w[p.rows + mask + (j >> 5)] >> (j & 31u)) & 1u) == 0u) continue;
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
