#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"

namespace kiln {
namespace {

struct Case {
  uint32_t f32;
  uint16_t expected;
  const char* what;
};

// Expected bit patterns worked out by hand from IEEE 754 round-to-nearest-even.
TEST(DType, F32ToBf16EdgeValues) {
  const Case cases[] = {
      {0x3f800000, 0x3f80, "1.0"},
      {0x3f808000, 0x3f80, "tie, even below: stays"},
      {0x3f818000, 0x3f82, "tie, odd below: rounds up"},
      {0x3f808001, 0x3f81, "just above the tie"},
      {0x3f807fff, 0x3f80, "just below the tie"},
      {0x80000000, 0x8000, "-0"},
      {0x7f800000, 0x7f80, "+inf"},
      {0xff800000, 0xff80, "-inf"},
      {0x7f7fffff, 0x7f80, "max finite rounds to inf"},
      {0x00000001, 0x0000, "smallest subnormal rounds to zero"},
      {0x00018000, 0x0002, "subnormal tie rounds to even"},
      {0x00400000, 0x0040, "subnormal exact"},
      {0xc0490fdb, 0xc049, "-pi"},
  };
  for (const auto& c : cases) EXPECT_EQ(f32_to_bf16(f32_from_bits(c.f32)), c.expected) << c.what;
  // NaNs stay NaN (quiet), including the signalling one whose payload sits in the low half.
  for (uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xffc00001u}) {
    uint16_t h = f32_to_bf16(f32_from_bits(nan));
    EXPECT_EQ(h & 0x7f80, 0x7f80);
    EXPECT_NE(h & 0x007f, 0) << std::hex << nan;
    EXPECT_TRUE(std::isnan(bf16_to_f32(h)));
  }
}

TEST(DType, F32ToF16EdgeValues) {
  const Case cases[] = {
      {0x3f800000, 0x3c00, "1.0"},
      {0x477fe000, 0x7bff, "65504, max finite"},
      {0x477fefff, 0x7bff, "just below 65520"},
      {0x477ff000, 0x7c00, "65520 rounds to inf"},
      {0x7f800000, 0x7c00, "+inf"},
      {0xff800000, 0xfc00, "-inf"},
      {0x38800000, 0x0400, "2^-14, smallest normal"},
      {0x33800000, 0x0001, "2^-24, smallest subnormal"},
      {0x33000000, 0x0000, "2^-25: tie between 0 and 2^-24, rounds to even 0"},
      {0x33400000, 0x0001, "1.5 * 2^-25 rounds up"},
      {0x33c00000, 0x0002, "1.5 * 2^-24: tie, rounds to even 2"},
      {0x387fe000, 0x0400, "1023.5 * 2^-24: tie, rounds up to even into the normals"},
      {0x3f801000, 0x3c00, "1 + 2^-11: tie, stays even"},
      {0x3f803000, 0x3c02, "1 + 3 * 2^-11: tie, rounds up to even"},
      {0x80000000, 0x8000, "-0"},
      {0x2f800000, 0x0000, "2^-32 underflows to zero"},
      {0xc2f70000, 0xd7b8, "-123.5"},
  };
  for (const auto& c : cases) EXPECT_EQ(f32_to_f16(f32_from_bits(c.f32)), c.expected) << c.what;
  uint16_t nan = f32_to_f16(f32_from_bits(0x7fc00000));
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
}

TEST(DType, EveryHalfRoundTripsThroughF32) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const uint16_t v = static_cast<uint16_t>(h);
    const bool f16_nan = (v & 0x7c00) == 0x7c00 && (v & 0x3ff);
    const bool bf16_nan = (v & 0x7f80) == 0x7f80 && (v & 0x7f);
    if (!f16_nan) {
      EXPECT_EQ(f32_to_f16(f16_to_f32(v)), v) << std::hex << h;
    }
    if (!bf16_nan) {
      EXPECT_EQ(f32_to_bf16(bf16_to_f32(v)), v) << std::hex << h;
    }
  }
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.f, -24));
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.f);
}

TEST(DType, BulkConversionsMatchScalar) {
  std::mt19937 rng(7);
  std::vector<uint16_t> h(1037);
  for (auto& x : h) x = static_cast<uint16_t>(rng() & 0x7bff);  // finite values
  std::vector<float> a(h.size());
  bf16_to_f32(h.data(), a.data(), h.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(a[i], bf16_to_f32(h[i]));
  f16_to_f32(h.data(), a.data(), h.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(a[i], f16_to_f32(h[i]));
}

// e4m3 (OCP fp8, "e4m3fn"): bias 7, 3 mantissa bits, subnormals of 2^-9, largest finite 448
// (0x7e), 0x7f the NaN. Expected patterns worked out by hand from that layout.
TEST(DType, F32ToE4m3EdgeValues) {
  const struct {
    float f;
    uint8_t expected;
    const char* what;
  } cases[] = {
      {1.f, 0x38, "1.0 = 2^0: exponent field 7"},
      {-2.f, 0xc0, "-2.0"},
      {1.0625f, 0x38, "tie between 1 and 1.125: even stays"},
      {1.1875f, 0x3a, "tie between 1.125 and 1.25: rounds to even"},
      {1.07f, 0x39, "above the tie"},
      {448.f, 0x7e, "largest finite"},
      {449.f, 0x7e, "above 448 saturates"},
      {1e9f, 0x7e, "far above saturates"},
      {INFINITY, 0x7e, "+inf saturates"},
      {-INFINITY, 0xfe, "-inf saturates"},
      {0.015625f, 0x08, "2^-6, smallest normal"},
      {0.001953125f, 0x01, "2^-9, smallest subnormal"},
      {0.0009765625f, 0x00, "2^-10: tie to even, zero"},
      {0.0029296875f, 0x02, "1.5 * 2^-9: tie to even, 2 * 2^-9"},
      {0.0153f, 0x08, "just below 2^-6: rounds up into the normals"},
      {-0.f, 0x80, "-0"},
      {240.f, 0x77, "240 = 1.875 * 2^7"},
  };
  for (const auto& c : cases) EXPECT_EQ(f32_to_e4m3(c.f), c.expected) << c.what;
  EXPECT_EQ(f32_to_e4m3(NAN) & 0x7f, 0x7f);
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0x7f)));
  EXPECT_TRUE(std::isnan(e4m3_to_f32(0xff)));
}

// Every finite e4m3 value widens exactly and converts back to itself; each value between two
// neighbours rounds to the nearer one.
TEST(DType, E4m3RoundTripsAndRoundsToNearest) {
  std::vector<float> finite;
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) == 0x7f) continue;
    const float f = e4m3_to_f32(static_cast<uint8_t>(b));
    EXPECT_EQ(f32_to_e4m3(f), b) << b;
    if (b < 0x7f) finite.push_back(f);
  }
  ASSERT_EQ(finite.size(), 127u);
  EXPECT_EQ(finite.back(), 448.f);
  for (size_t i = 0; i + 1 < finite.size(); ++i) {
    const float lo = finite[i], hi = finite[i + 1];
    ASSERT_LT(lo, hi);
    EXPECT_EQ(rounded_to(DType::kF8E4M3, lo + 0.3f * (hi - lo)), lo);
    EXPECT_EQ(rounded_to(DType::kF8E4M3, lo + 0.7f * (hi - lo)), hi);
  }
  std::vector<float> wide(256);
  std::vector<uint8_t> bytes(256);
  for (int b = 0; b < 256; ++b) bytes[b] = static_cast<uint8_t>(b);
  to_f32(DType::kF8E4M3, bytes.data(), wide.data(), 256);
  for (int b = 0; b < 256; ++b) {
    if ((b & 0x7f) != 0x7f) {
      EXPECT_EQ(wide[b], e4m3_to_f32(bytes[b]));
    }
  }
}

TEST(DType, NamesParse) {
  EXPECT_EQ(parse_dtype("bfloat16"), DType::kBF16);
  EXPECT_EQ(parse_dtype("f32"), DType::kF32);
  EXPECT_FALSE(parse_dtype("f8").has_value());
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(parse_dtype("f8e4m3"), DType::kF8E4M3);
  EXPECT_EQ(dtype_name(DType::kF8E4M3), "f8e4m3");
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
}

}  // namespace
}  // namespace kiln
