#version 450
// The binary elementwise ops of backend/elementwise_ops.h (op: its ElementwiseOp number; the math
// as `apply` there) over rows that may be strided; out f32, or bf16 where the op allows it.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(push_constant) uniform P {
  uint64_t a, b, out_;
  uint rows, width, a_stride, b_stride, out_stride, out_dtype, op;
} p;

const uint OP_ADD = 1u;
const uint OP_SILU_MUL = 2u;

void main() {
  const uint i = flat_group() * 256u + gl_LocalInvocationID.x;
  if (i >= p.rows * p.width) return;
  const uint r = i / p.width, c = i % p.width;
  const float x = F32(p.a).v[r * p.a_stride + c], y = F32(p.b).v[r * p.b_stride + c];
  const float v = p.op == OP_ADD ? x + y : x / (1.0 + exp(-x)) * y;
  store(p.out_, r * p.out_stride + c, p.out_dtype, v);
}
