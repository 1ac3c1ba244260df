// Element types and conversions between the floating types a checkpoint may hold.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace hfx {

enum class DType : uint8_t { F32, F16, BF16, F64, I64, I32, I16, I8, U8, Bool };

size_t dtype_size(DType t);
bool is_float(DType t);
// Manifest / CLI spelling: "float32", "float16", "bfloat16", "int64", "bool", ...
std::string_view dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
// Safetensors header spelling: "F32", "F16", "BF16", "I64", "BOOL", ...
std::optional<DType> dtype_from_safetensors(std::string_view code);
std::string_view dtype_safetensors_code(DType t);

// Converts n elements between F32, F16 and BF16 (any pair, same type = copy).
void convert_floats(const void* src, DType src_type, void* dst, DType dst_type, size_t n);

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float bf16_to_f32(uint16_t b);
uint16_t f32_to_bf16(float f);

}  // namespace hfx
