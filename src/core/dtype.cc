#include "core/dtype.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <immintrin.h>

namespace kiln {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kBF16: case DType::kF16: return 2;
    case DType::kI64: return 8;
    case DType::kU8: case DType::kF8E4M3: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
    case DType::kF8E4M3: return "f8e4m3";
  }
  return "?";
}

std::optional<DType> parse_dtype(std::string_view s) {
  if (s == "f32" || s == "float32" || s == "F32") return DType::kF32;
  if (s == "bf16" || s == "bfloat16" || s == "BF16") return DType::kBF16;
  if (s == "f16" || s == "float16" || s == "F16") return DType::kF16;
  if (s == "i32" || s == "int32" || s == "I32") return DType::kI32;
  if (s == "i64" || s == "int64" || s == "I64") return DType::kI64;
  if (s == "u8" || s == "uint8" || s == "U8") return DType::kU8;
  if (s == "f8e4m3" || s == "float8_e4m3fn") return DType::kF8E4M3;
  return std::nullopt;
}

bool is_float(DType t) { return t == DType::kF32 || t == DType::kBF16 || t == DType::kF16; }

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_bits(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x3ffu);  // NaN
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: infinity
  if (a >= 0x38800000u) {                       // normal f16 range (>= 2^-14)
    uint32_t rounding = 0xfffu + ((a >> 13) & 1u);
    return sign | static_cast<uint16_t>((a - 0x38000000u + rounding) >> 13);
  }
  // Subnormal f16 (or zero): value = mantissa * 2^-24. Shift the full 24-bit significand.
  if (a < 0x33000000u) return sign;  // below half the smallest subnormal: rounds to zero
  uint32_t exp = a >> 23;
  uint32_t mant = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exp;  // bits to drop so that one unit = 2^-24
  uint32_t half = 1u << (shift - 1);
  uint32_t rem = mant & ((1u << shift) - 1u);
  uint32_t q = mant >> shift;
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // Subnormal: normalise into an f32 normal.
    int e = -1;
    do { mant <<= 1; ++e; } while ((mant & 0x400u) == 0);
    return f32_from_bits(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | ((mant & 0x3ffu) << 13));
  }
  return f32_from_bits(sign | ((exp + 112u) << 23) | (mant << 13));
}

// e4m3 keeps 3 mantissa bits and exponents -6..8 (bias 7); below 2^-6 the step is 2^-9.
uint8_t f32_to_e4m3(float f) {
  const uint32_t u = f32_bits(f);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7fu;
  if (a >= 448.f) return sign | 0x7eu;  // saturate (448 = 1.75 * 2^8 is the largest finite)
  const int e = std::max(std::ilogb(a), -6);  // a == 0 gives a huge negative ilogb: clamped
  const float step = std::ldexp(1.f, e - 3);
  const float r = std::nearbyint(a / step) * step;  // exact: a / step < 16 fits in f32; ties to even
  if (r == 0.f) return sign;
  const int er = std::ilogb(r);  // rounding may have carried into the next binade
  if (er < -6) return sign | static_cast<uint8_t>(r / std::ldexp(1.f, -9));  // subnormal
  if (r >= 448.f) return sign | 0x7eu;
  const int mant = static_cast<int>(r / std::ldexp(1.f, er - 3)) - 8;
  return sign | static_cast<uint8_t>(((er + 7) << 3) | mant);
}

float e4m3_to_f32(uint8_t b) {
  const float s = (b & 0x80u) ? -1.f : 1.f;
  const int exp = (b >> 3) & 0xf, mant = b & 0x7;
  if (exp == 0xf && mant == 0x7) return std::numeric_limits<float>::quiet_NaN() * s;
  if (exp == 0) return s * std::ldexp(static_cast<float>(mant), -9);
  return s * std::ldexp(static_cast<float>(8 + mant), exp - 10);
}

float rounded_to(DType t, float f) {
  switch (t) {
    case DType::kBF16: return bf16_to_f32(f32_to_bf16(f));
    case DType::kF16: return f16_to_f32(f32_to_f16(f));
    case DType::kF8E4M3: return e4m3_to_f32(f32_to_e4m3(f));
    default: return f;
  }
}

void bf16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; ++i) dst[i] = bf16_to_f32(src[i]);
}

void f16_to_f32(const uint16_t* src, float* dst, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_bf16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(src[i]);
}

void f32_to_f16(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) dst[i] = f32_to_f16(src[i]);
}

void to_f32(DType t, const void* src, float* dst, size_t n) {
  switch (t) {
    case DType::kF32: std::memcpy(dst, src, n * 4); return;
    case DType::kBF16: bf16_to_f32(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::kF16: f16_to_f32(static_cast<const uint16_t*>(src), dst, n); return;
    case DType::kF8E4M3:
      for (size_t i = 0; i < n; ++i) dst[i] = e4m3_to_f32(static_cast<const uint8_t*>(src)[i]);
      return;
    default: assert(false && "to_f32 on a non-float dtype");
  }
}

}  // namespace kiln
