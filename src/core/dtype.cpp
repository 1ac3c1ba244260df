#include "core/dtype.h"

#include <bit>
#include <cstring>
#include <vector>

#include "core/error.h"

namespace hfx {
namespace {

struct DTypeInfo {
  DType type;
  size_t size;
  std::string_view name;
  std::string_view safetensors;
};

constexpr DTypeInfo kTypes[] = {
    {DType::F32, 4, "float32", "F32"}, {DType::F16, 2, "float16", "F16"},
    {DType::BF16, 2, "bfloat16", "BF16"}, {DType::F64, 8, "float64", "F64"},
    {DType::I64, 8, "int64", "I64"},     {DType::I32, 4, "int32", "I32"},
    {DType::I16, 2, "int16", "I16"},     {DType::I8, 1, "int8", "I8"},
    {DType::U8, 1, "uint8", "U8"},       {DType::Bool, 1, "bool", "BOOL"},
};

const DTypeInfo& info(DType t) {
  for (const auto& i : kTypes)
    if (i.type == t) return i;
  fail("internal error: unknown dtype ", static_cast<int>(t));
}

}  // namespace

size_t dtype_size(DType t) { return info(t).size; }
bool is_float(DType t) {
  return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::F64;
}
std::string_view dtype_name(DType t) { return info(t).name; }
std::string_view dtype_safetensors_code(DType t) { return info(t).safetensors; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& i : kTypes)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_safetensors(std::string_view code) {
  for (const auto& i : kTypes)
    if (i.safetensors == code) return i.type;
  return std::nullopt;
}

float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {  // subnormal: renormalise
    exp = 113;
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    bits = sign | (exp << 23) | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t f32_to_f16(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs = bits & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // rounds to infinity
  if (abs < 0x38800000u) {                        // subnormal or zero in f16
    if (abs < 0x33000000u) return sign;
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - exp;
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1);
    const uint32_t midpoint = 1u << (shift - 1);
    if (rem > midpoint || (rem == midpoint && (half & 1u))) ++half;
    return sign | static_cast<uint16_t>(half);
  }
  uint32_t half = ((abs - 0x38000000u) >> 13);
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;
  return sign | static_cast<uint16_t>(half);
}

float bf16_to_f32(uint16_t b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }

uint16_t f32_to_bf16(float f) {
  uint32_t bits = std::bit_cast<uint32_t>(f);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);  // round to nearest even
  return static_cast<uint16_t>(bits >> 16);
}

namespace {

float load_float(const std::byte* p, DType t) {
  uint16_t h;
  float f;
  switch (t) {
    case DType::F32:
      std::memcpy(&f, p, 4);
      return f;
    case DType::F16:
      std::memcpy(&h, p, 2);
      return f16_to_f32(h);
    case DType::BF16:
      std::memcpy(&h, p, 2);
      return bf16_to_f32(h);
    default:
      fail("internal error: not a convertible float type: ", dtype_name(t));
  }
}

void store_float(std::byte* p, DType t, float f) {
  uint16_t h;
  switch (t) {
    case DType::F32:
      std::memcpy(p, &f, 4);
      return;
    case DType::F16:
      h = f32_to_f16(f);
      std::memcpy(p, &h, 2);
      return;
    case DType::BF16:
      h = f32_to_bf16(f);
      std::memcpy(p, &h, 2);
      return;
    default:
      fail("internal error: not a convertible float type: ", dtype_name(t));
  }
}

}  // namespace

void convert_floats(const void* src, DType src_type, void* dst, DType dst_type, size_t n) {
  if (src_type == dst_type) {
    std::memcpy(dst, src, n * dtype_size(src_type));
    return;
  }
  const auto* s = static_cast<const std::byte*>(src);
  auto* d = static_cast<std::byte*>(dst);
  if (src_type == DType::BF16 && dst_type == DType::F32) {  // the hot path: a shift
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, s + 2 * i, 2);
      const uint32_t bits = static_cast<uint32_t>(h) << 16;
      std::memcpy(d + 4 * i, &bits, 4);
    }
    return;
  }
  const size_t ss = dtype_size(src_type), ds = dtype_size(dst_type);
  for (size_t i = 0; i < n; ++i) store_float(d + ds * i, dst_type, load_float(s + ss * i, src_type));
}

}  // namespace hfx
