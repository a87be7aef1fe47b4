#version 450
// Device-to-device copy of 16-byte words, one an invocation: spread over every compute unit it
// reaches the memory's bandwidth, where vkCmdCopyBuffer on some drivers runs on a slower engine.
#include "common.glsl"
layout(local_size_x = 256) in;
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Words { uvec4 v[]; };
layout(push_constant) uniform P {
  uint64_t src, dst;
  uint words;
} p;

void main() {
  const uint i = flat_group() * 256u + gl_LocalInvocationID.x;
  if (i < p.words) Words(p.dst).v[i] = Words(p.src).v[i];
}
