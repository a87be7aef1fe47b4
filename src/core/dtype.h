// Element types and exact conversions between f32 and the 16-bit floats (round to nearest even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kiln {

enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);          // "f32", "bf16", ...
std::optional<DType> parse_dtype(std::string_view name);  // accepts "f32" / "float32" / "bf16" ...
bool is_float(DType t);

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// bf16 is the top half of an f32; conversion rounds the dropped half to nearest even and keeps
// NaN a (quiet) NaN rather than letting rounding carry it into infinity.
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  uint32_t rounding = 0x7fffu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}
inline float bf16_to_f32(uint16_t h) { return f32_from_bits(static_cast<uint32_t>(h) << 16); }

uint16_t f32_to_f16(float f);  // IEEE binary16, RNE, overflow to inf, subnormals kept
float f16_to_f32(uint16_t h);

// Bulk conversions to f32 (vectorised where the compiler can).
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void f16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void f32_to_f16(const float* src, uint16_t* dst, size_t n);
// Converts n elements of any float dtype to f32.
void to_f32(DType src_type, const void* src, float* dst, size_t n);

}  // namespace kiln
