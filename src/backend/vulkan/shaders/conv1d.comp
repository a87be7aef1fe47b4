#version 450
// Depthwise causal conv1d + silu over each row's tokens, continuing its sequence from the row's
// state slot (the last K-1 inputs before the row; zeros at a sequence's start) and leaving the
// row's last K-1 inputs there. One invocation a (row, channel) walks the row's tokens with the
// window in registers: the rows are independent and the channels are thousands. A slot outside
// the pool leaves the row untouched (the host cannot check slots without reading them back).
#include "common.glsl"
layout(constant_id = 0) const uint K = 4;  // taps
layout(local_size_x = 64) in;
layout(push_constant) uniform P {
  uint64_t x, weight, state, out_, cu_seqlens, state_slots;
  uint rows, channels, x_stride, weight_stride, state_slot_stride, state_tap_stride, out_stride, slots;
} p;

void main() {
  const uint i = flat_group() * 64u + gl_LocalInvocationID.x;
  if (i >= p.rows * p.channels) return;
  const uint row = i / p.channels, c = i % p.channels;
  const int slot = I32(p.state_slots).v[row];
  if (slot < 0 || uint(slot) >= p.slots) return;
  const uint t0 = uint(I32(p.cu_seqlens).v[row]), t1 = uint(I32(p.cu_seqlens).v[row + 1]);
  const uint64_t st = advance(p.state, uint64_t(slot) * p.state_slot_stride, DTYPE_F32);
  float w[K], win[K];  // win: the inputs t-K+1 .. t
  for (uint k = 0; k < K; ++k) w[k] = F32(p.weight).v[c * p.weight_stride + k];
  for (uint k = 0; k + 1 < K; ++k) win[k] = F32(st).v[k * p.state_tap_stride + c];
  for (uint t = t0; t < t1; ++t) {
    win[K - 1] = F32(advance(p.x, uint64_t(t) * p.x_stride, DTYPE_F32)).v[c];
    float acc = 0.0;
    for (uint k = 0; k < K; ++k) acc += w[k] * win[k];
    F32(advance(p.out_, uint64_t(t) * p.out_stride, DTYPE_F32)).v[c] = acc / (1.0 + exp(-acc));
    for (uint k = 0; k + 1 < K; ++k) win[k] = win[k + 1];
  }
  // The window now ends with the row's last K-1 inputs (old state where the row is shorter).
  for (uint k = 0; k + 1 < K; ++k) F32(st).v[k * p.state_tap_stride + c] = win[k];
}
