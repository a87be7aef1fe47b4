#version 450
// The sum of a matmul split over k: out[i, j] (+)= sum over z of part[z, i, j], the parts
// contiguous [splits, m, n] blocks. One invocation an element.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t part, out_;
  uint m, n, splits, out_stride, accumulate;
} p;

void main() {
  const uint e = flat_group() * 256u + gl_LocalInvocationID.x;
  if (e >= p.m * p.n) return;
  const uint i = e / p.n, j = e % p.n;
  float s = 0.0;
  for (uint z = 0u; z < p.splits; ++z) s += F32(advance(p.part, (uint64_t(z) * p.m + i) * p.n, DTYPE_F32)).v[j];
  F32 o = F32(advance(p.out_, uint64_t(i) * p.out_stride, DTYPE_F32));
  o.v[j] = p.accumulate != 0u ? o.v[j] + s : s;
}
