#include "odc/core/dtype.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "odc/core/error.h"

namespace odc {

std::size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::f32: return 4;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::f64: return 8;
    case DType::i32: return 4;
    case DType::u32: return 4;
    case DType::i64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32: return "float32";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f64: return "float64";
    case DType::i32: return "int32";
    case DType::u32: return "uint32";
    case DType::i64: return "int64";
  }
  return "?";
}

DType parse_dtype(std::string_view name) {
  if (name == "float32" || name == "f32" || name == "F32" || name == "fp32") return DType::f32;
  if (name == "bfloat16" || name == "bf16" || name == "BF16") return DType::bf16;
  if (name == "float16" || name == "f16" || name == "F16" || name == "fp16") return DType::f16;
  if (name == "float64" || name == "f64" || name == "F64") return DType::f64;
  if (name == "int32" || name == "I32") return DType::i32;
  if (name == "uint32" || name == "U32") return DType::u32;
  if (name == "int64" || name == "I64") return DType::i64;
  fail("unknown dtype '{}': expected one of float32, bfloat16, float16, float64, int32, uint32, int64",
       name);
}

std::uint16_t f32_to_bf16(float value) {
  std::uint32_t bits = std::bit_cast<std::uint32_t>(value);
  if (std::isnan(value)) return static_cast<std::uint16_t>((bits >> 16) | 0x40);  // quiet NaN
  const std::uint32_t rounding = 0x7FFF + ((bits >> 16) & 1);  // round to nearest even
  return static_cast<std::uint16_t>((bits + rounding) >> 16);
}

float bf16_to_f32(std::uint16_t bits) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16);
}

std::uint16_t f32_to_f16(float value) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(value);
  const std::uint32_t sign = (x >> 16) & 0x8000;
  const std::uint32_t abs = x & 0x7FFFFFFF;
  if (abs >= 0x7F800000) {  // inf or nan
    return static_cast<std::uint16_t>(sign | 0x7C00 | (abs > 0x7F800000 ? 0x200 : 0));
  }
  if (abs >= 0x477FF000) return static_cast<std::uint16_t>(sign | 0x7C00);  // overflow -> inf
  if (abs < 0x38800000) {  // subnormal half (or zero): units of 2^-24, round to nearest even
    const double scaled = static_cast<double>(std::bit_cast<float>(abs)) * 16777216.0;
    return static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)));
  }
  std::uint32_t out = ((abs - 0x38000000) >> 13);
  const std::uint32_t rem = abs & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (out & 1))) ++out;
  return static_cast<std::uint16_t>(sign | out);
}

float f16_to_f32(std::uint16_t bits) {
  const std::uint32_t sign = static_cast<std::uint32_t>(bits & 0x8000) << 16;
  const std::uint32_t exp = (bits >> 10) & 0x1F;
  const std::uint32_t mant = bits & 0x3FF;
  if (exp == 0) {
    const float value = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -value : value;
  }
  if (exp == 31) return std::bit_cast<float>(sign | 0x7F800000 | (mant << 13));
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

}  // namespace odc
