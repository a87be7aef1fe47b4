// What every shader shares: pointer types over buffer device addresses (a tensor's address and
// element index in, a value out), bf16/f16 widening and rounding, and the flat workgroup index.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer F32 { float v[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer I32 { int v[]; };
layout(buffer_reference, std430, buffer_reference_align = 2) buffer U16 { uint16_t v[]; };

// Element dtypes as core/dtype.h numbers them; DTYPE_* match DType's enumerators.
const uint DTYPE_F32 = 0u;
const uint DTYPE_BF16 = 1u;
const uint DTYPE_F16 = 2u;

float bf16_to_f32(uint h) { return uintBitsToFloat(h << 16); }
float f16_to_f32(uint h) { return unpackHalf2x16(h).x; }

// Round to nearest even, NaN kept quiet (core/dtype.h's f32_to_bf16).
uint f32_to_bf16(float x) {
  uint u = floatBitsToUint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (u >> 16) | 0x40u;
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
}
uint f32_to_f16(float x) { return packHalf2x16(vec2(x, 0.0)) & 0xffffu; }

float load(uint64_t base, uint i, uint dtype) {
  if (dtype == DTYPE_F32) return F32(base).v[i];
  uint h = uint(U16(base).v[i]);
  return dtype == DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void store(uint64_t base, uint i, uint dtype, float x) {
  if (dtype == DTYPE_F32) F32(base).v[i] = x;
  else U16(base).v[i] = uint16_t(dtype == DTYPE_BF16 ? f32_to_bf16(x) : f32_to_f16(x));
}

uint flat_group() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

uint dtype_bytes(uint dtype) { return dtype == DTYPE_F32 ? 4u : 2u; }
// The address `elements` elements past `base`: rows and heads far into a large tensor (the index
// of load/store is 32-bit).
uint64_t advance(uint64_t base, uint64_t elements, uint dtype) { return base + elements * dtype_bytes(dtype); }
