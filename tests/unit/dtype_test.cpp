// Element types: the name tables and the f16 / bf16 <-> f32 conversions (exact values, rounding to
// nearest even, subnormals, infinities, NaN), and convert_floats for every pair of float types.
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <iterator>
#include <limits>
#include <vector>

namespace hfx {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

float bits_f32(uint32_t b) { return std::bit_cast<float>(b); }
uint32_t f32_bits(float f) { return std::bit_cast<uint32_t>(f); }
bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80u) == 0x7f80u && (b & 0x7fu) != 0; }

TEST(DTypeTable, SizesNamesAndCodes) {
  const DType all[] = {DType::F32, DType::F16, DType::BF16, DType::F64, DType::I64,
                       DType::I32, DType::I16, DType::I8,   DType::U8,  DType::Bool};
  const size_t sizes[] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};
  for (size_t i = 0; i < std::size(all); ++i) {
    EXPECT_EQ(dtype_size(all[i]), sizes[i]) << dtype_name(all[i]);
    EXPECT_EQ(dtype_from_name(dtype_name(all[i])), all[i]);
    EXPECT_EQ(dtype_from_safetensors(dtype_safetensors_code(all[i])), all[i]);
  }
  EXPECT_EQ(dtype_name(DType::BF16), "bfloat16");
  EXPECT_EQ(dtype_safetensors_code(DType::Bool), "BOOL");
  EXPECT_EQ(dtype_from_safetensors("F7"), std::nullopt);
  EXPECT_EQ(dtype_from_safetensors("f32"), std::nullopt);  // codes are case-sensitive
  EXPECT_EQ(dtype_from_name("float"), std::nullopt);
  EXPECT_TRUE(is_float(DType::F16) && is_float(DType::BF16) && is_float(DType::F32) && is_float(DType::F64));
  EXPECT_FALSE(is_float(DType::I64) || is_float(DType::Bool) || is_float(DType::U8));
}

TEST(F16, ToF32ExactValues) {
  EXPECT_EQ(f32_bits(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(f32_bits(f16_to_f32(0x8000)), 0x80000000u);  // -0 keeps its sign
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0x0400), std::ldexp(1.0f, -14));           // smallest normal
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));           // smallest subnormal
  EXPECT_EQ(f16_to_f32(0x8001), -std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));        // largest subnormal
  EXPECT_EQ(f16_to_f32(0x0200), std::ldexp(1.0f, -15));
  EXPECT_EQ(f16_to_f32(0x7c00), kInf);
  EXPECT_EQ(f16_to_f32(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfe00)));
}

TEST(F16, FromF32ExactValues) {
  EXPECT_EQ(f32_to_f16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -14)), 0x0400);
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(f32_to_f16(-std::ldexp(1.0f, -24)), 0x8001);
  EXPECT_EQ(f32_to_f16(std::ldexp(1023.0f, -24)), 0x03ff);
  EXPECT_EQ(f32_to_f16(kInf), 0x7c00);
  EXPECT_EQ(f32_to_f16(-kInf), 0xfc00);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_f32(0x7f800001u))));  // payload only in low bits: still NaN
  EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_f32(0xffc00000u))));
}

TEST(F16, RoundsToNearestEven) {
  // Normal range: ulp(1) = 2^-10.
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);  // tie -> even (down)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(3.0f, -11)), 0x3c02);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)), 0x3c01);  // above tie
  EXPECT_EQ(f32_to_f16(1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -20)), 0x3c00);  // below tie
  EXPECT_EQ(f32_to_f16(2047.0f / 1024.0f + std::ldexp(1.0f, -11)), 0x4000);  // carry into exponent
  // Overflow: 65520 is the tie between 65504 (odd) and 65536 (inf, even).
  EXPECT_EQ(f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(-1e6f), 0xfc00);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::max()), 0x7c00);
  // Subnormal range: unit 2^-24.
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);  // tie -> 0
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25) * 1.0001f), 0x0001);
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 units: tie -> 2
  EXPECT_EQ(f32_to_f16(std::ldexp(5.0f, -25)), 0x0002);  // 2.5 units: tie -> 2
  EXPECT_EQ(f32_to_f16(std::ldexp(2047.0f, -25)), 0x0400);  // 1023.5 units rounds up into normals
  EXPECT_EQ(f32_to_f16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_f16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(F16, EveryHalfRoundTrips) {
  for (uint32_t h = 0; h <= 0xffff; ++h) {
    const auto half = static_cast<uint16_t>(h);
    const float f = f16_to_f32(half);
    if (f16_is_nan(half)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(f16_is_nan(f32_to_f16(f))) << std::hex << h;
    } else {
      ASSERT_EQ(f32_to_f16(f), half) << std::hex << h;
    }
  }
}

// For a spread of f32 bit patterns, the f16 result is the nearest representable value (ties to
// the even mantissa), checked against both neighbours in double precision.
TEST(F16, FromF32IsNearest) {
  uint32_t state = 12345;
  for (int i = 0; i < 50000; ++i) {
    state = state * 1664525u + 1013904223u;
    // Exponents from 2^-26 to 2^16 (covers zero-flush, subnormals, normals, overflow edge).
    const uint32_t exp = 101 + (state >> 8) % 42;
    const uint32_t bits = (state & 0x80000000u) | (exp << 23) | ((state * 2654435761u) & 0x7fffffu);
    const float f = bits_f32(bits);
    const uint16_t h = f32_to_f16(f);
    const double x = std::fabs(static_cast<double>(f));
    const uint16_t mag = h & 0x7fffu;
    ASSERT_EQ(h & 0x8000u, (bits >> 16) & 0x8000u) << f;
    if (mag == 0x7c00u) {
      ASSERT_GE(x, 65520.0) << f;
      continue;
    }
    const double got = f16_to_f32(mag);
    const double err = std::fabs(x - got);
    const double up = mag + 1u == 0x7c00u ? 65536.0 : f16_to_f32(static_cast<uint16_t>(mag + 1));
    ASSERT_LE(err, std::fabs(up - x)) << f;
    if (err == std::fabs(up - x)) {
      ASSERT_EQ(mag & 1u, 0u) << "tie not to even: " << f;
    }
    if (mag > 0) {
      const double down = f16_to_f32(static_cast<uint16_t>(mag - 1));
      ASSERT_LE(err, std::fabs(x - down)) << f;
      if (err == std::fabs(x - down)) {
        ASSERT_EQ(mag & 1u, 0u) << "tie not to even: " << f;
      }
    }
  }
}

TEST(BF16, ExactValues) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f32_bits(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));  // f32 subnormal
  EXPECT_EQ(bf16_to_f32(0x7f80), kInf);
  EXPECT_EQ(bf16_to_f32(0xff80), -kInf);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
  EXPECT_EQ(bf16_to_f32(0x7f7f), bits_f32(0x7f7f0000u));

  EXPECT_EQ(f32_to_bf16(0.0f), 0x0000);
  EXPECT_EQ(f32_to_bf16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(f32_to_bf16(65504.0f), 0x4780);  // 65504 rounds to 65536 in bf16
  EXPECT_EQ(f32_to_bf16(kInf), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-kInf), 0xff80);
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_f32(0x7f800001u))));  // truncation alone would give inf
  EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bits_f32(0xff800001u))));
  EXPECT_EQ(f32_to_bf16(bits_f32(0xff800001u)) & 0x8000u, 0x8000u);
}

TEST(BF16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808000u)), 0x3f80);  // 1 + 2^-8: tie -> even (down)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f818000u)), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f808001u)), 0x3f81);  // above tie
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3f807fffu)), 0x3f80);  // below tie
  EXPECT_EQ(f32_to_bf16(bits_f32(0x3fffffffu)), 0x4000);  // carry into exponent
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // rounds to inf
  EXPECT_EQ(f32_to_bf16(bits_f32(0x7f7f7fffu)), 0x7f7f);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00008000u)), 0x0000);  // subnormal tie -> 0
  EXPECT_EQ(f32_to_bf16(bits_f32(0x00018000u)), 0x0002);
  EXPECT_EQ(f32_to_bf16(bits_f32(0x80008001u)), 0x8001);
}

TEST(BF16, EveryBF16RoundTrips) {
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    const auto v = static_cast<uint16_t>(b);
    if (bf16_is_nan(v)) {
      EXPECT_TRUE(bf16_is_nan(f32_to_bf16(bf16_to_f32(v)))) << std::hex << b;
    } else {
      ASSERT_EQ(f32_to_bf16(bf16_to_f32(v)), v) << std::hex << b;
    }
  }
}

// Encodes/decodes one element of a float type through f32.
uint32_t encode(DType t, float f) {
  switch (t) {
    case DType::F32: return f32_bits(f);
    case DType::F16: return f32_to_f16(f);
    case DType::BF16: return f32_to_bf16(f);
    default: ADD_FAILURE(); return 0;
  }
}
float decode(DType t, uint32_t bits) {
  switch (t) {
    case DType::F32: return bits_f32(bits);
    case DType::F16: return f16_to_f32(static_cast<uint16_t>(bits));
    case DType::BF16: return bf16_to_f32(static_cast<uint16_t>(bits));
    default: ADD_FAILURE(); return 0;
  }
}

std::vector<std::byte> pack(DType t, const std::vector<float>& values) {
  const size_t size = dtype_size(t);
  std::vector<std::byte> out(values.size() * size);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = encode(t, values[i]);
    std::memcpy(out.data() + i * size, &bits, size);  // little-endian: low bytes first
  }
  return out;
}

std::vector<uint32_t> unpack_bits(DType t, const std::vector<std::byte>& bytes) {
  const size_t size = dtype_size(t);
  std::vector<uint32_t> out(bytes.size() / size);
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], bytes.data() + i * size, size);
  return out;
}

TEST(ConvertFloats, EveryPair) {
  const std::vector<float> values{0.0f, -0.0f, 1.0f, -2.0f, 0.1f, 3.14159265f, 65504.0f, 1e5f, -1e-6f,
                                  std::ldexp(1.0f, -24), 1.0f + std::ldexp(1.0f, -11), kInf, -kInf,
                                  1.0f + std::ldexp(3.0f, -9)};
  const DType types[] = {DType::F32, DType::F16, DType::BF16};
  for (DType from : types) {
    // The source holds `values` as rounded into `from`; each element must convert exactly as the
    // scalar functions do (f16 and bf16 both widen to f32 exactly, so one rounding step).
    const std::vector<std::byte> src = pack(from, values);
    const std::vector<uint32_t> src_bits = unpack_bits(from, src);
    for (DType to : types) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)));
      std::vector<std::byte> dst(values.size() * dtype_size(to), std::byte{0xAB});
      convert_floats(src.data(), from, dst.data(), to, values.size());
      const std::vector<uint32_t> got = unpack_bits(to, dst);
      for (size_t i = 0; i < values.size(); ++i)
        EXPECT_EQ(got[i], encode(to, decode(from, src_bits[i]))) << "element " << i << " = " << values[i];
      // n == 0 touches nothing.
      std::vector<std::byte> untouched(dtype_size(to), std::byte{0x5A});
      convert_floats(src.data(), from, untouched.data(), to, 0);
      EXPECT_EQ(untouched[0], std::byte{0x5A});
    }
  }
  // Spot checks of specific results.
  const float one_third = 1.0f / 3.0f;
  uint16_t h = 0;
  convert_floats(&one_third, DType::F32, &h, DType::F16, 1);
  EXPECT_EQ(h, 0x3555);
  convert_floats(&one_third, DType::F32, &h, DType::BF16, 1);
  EXPECT_EQ(h, 0x3eab);
  const uint16_t bf = 0x4049;  // 3.140625
  float f = 0;
  convert_floats(&bf, DType::BF16, &f, DType::F32, 1);
  EXPECT_EQ(f, 3.140625f);
  convert_floats(&bf, DType::BF16, &h, DType::F16, 1);
  EXPECT_EQ(h, 0x4248);  // 3.140625 is exact in f16
  const uint16_t big = 0x7bff;  // 65504 in f16 -> bf16 rounds to 65536
  convert_floats(&big, DType::F16, &h, DType::BF16, 1);
  EXPECT_EQ(h, 0x4780);
}

}  // namespace
}  // namespace hfx
