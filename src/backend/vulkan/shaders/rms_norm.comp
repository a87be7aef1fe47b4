#version 450
// RMSNorm in its three forms (kind: NormKind's number: 0 (1 + w), 1 plain w, 2 gated by
// silu(z)), optionally after residual += x (the normalised value is then the residual's). One
// workgroup a row; sums of squares in f32 through shared memory. Out f32, or bf16 rounded to
// nearest even.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t x, residual, weight, gate, out_;
  uint width, x_stride, residual_stride, gate_stride, out_stride, kind, out_dtype;
  float eps;
} p;

shared float partial[256];

void main() {
  const uint row = flat_group(), lid = gl_LocalInvocationID.x;
  const bool fused = p.residual != 0ul;
  float ss = 0.0;
  for (uint j = lid; j < p.width; j += 256u) {
    float v = F32(p.x).v[row * p.x_stride + j];
    if (fused) {
      v += F32(p.residual).v[row * p.residual_stride + j];
      F32(p.residual).v[row * p.residual_stride + j] = v;
    }
    ss += v * v;
  }
  partial[lid] = ss;
  barrier();
  for (uint s = 128u; s > 0u; s >>= 1) {
    if (lid < s) partial[lid] += partial[lid + s];
    barrier();
  }
  const float inv = 1.0 / sqrt(partial[0] / float(p.width) + p.eps);
  for (uint j = lid; j < p.width; j += 256u) {
    const float v = fused ? F32(p.residual).v[row * p.residual_stride + j] : F32(p.x).v[row * p.x_stride + j];
    const float w = F32(p.weight).v[j];
    float y;
    if (p.kind == 0u) {
      y = v * inv * (1.0 + w);
    } else if (p.kind == 1u) {
      y = v * inv * w;
    } else {
      const float z = F32(p.gate).v[row * p.gate_stride + j];
      y = w * (v * inv) * (z / (1.0 + exp(-z)));
    }
    store(p.out_, row * p.out_stride + j, p.out_dtype, y);
  }
}
