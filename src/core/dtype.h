// Element types and exact conversions between f32 and the 16- and 8-bit floats (round to nearest
// even).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace kiln {

// kF8E4M3: OCP fp8 e4m3 ("e4m3fn": no infinities, max 448, one NaN pattern per sign); a storage
// type only (the K/V cache's `memory.kv_cache_fp8`), never an operand of the arithmetic facets.
enum class DType : uint8_t { kF32, kBF16, kF16, kI32, kI64, kU8, kF8E4M3 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);          // "f32", "bf16", ...
std::optional<DType> parse_dtype(std::string_view name);  // accepts "f32" / "float32" / "bf16" ...
bool is_float(DType t);  // f32, bf16, f16: the dtypes the facets compute with

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
// e4m3: round to nearest even, saturating to +-448 (infinities included) as the CUDA conversion
// with __NV_SATFINITE does; subnormals (multiples of 2^-9) kept; NaN stays NaN (0x7f | sign).
uint8_t f32_to_e4m3(float f);
float e4m3_to_f32(uint8_t b);
// f rounded to the nearest value of float dtype t and widened back (f itself for f32).
float rounded_to(DType t, float f);

// Bulk conversions to f32 (vectorised where the compiler can).
void bf16_to_f32(const uint16_t* src, float* dst, size_t n);
void f16_to_f32(const uint16_t* src, float* dst, size_t n);
void f32_to_bf16(const float* src, uint16_t* dst, size_t n);
void f32_to_f16(const float* src, uint16_t* dst, size_t n);
// Converts n elements of f32, bf16, f16 or f8e4m3 to f32.
void to_f32(DType src_type, const void* src, float* dst, size_t n);

}  // namespace kiln
