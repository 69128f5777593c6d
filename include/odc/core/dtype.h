#pragma once
// Element types and devices a Tensor can hold.
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace odc {

enum class DType : std::uint8_t { f32, bf16, f16, f64, i32, u32, i64 };

std::size_t dtype_size(DType dtype);
std::string_view dtype_name(DType dtype);
// Parses "float32"/"f32", "bfloat16"/"bf16", "float16"/"f16", "float64", "int32", "uint32", "int64".
// Throws odc::Error naming the accepted spellings.
DType parse_dtype(std::string_view name);

enum class DeviceKind : std::uint8_t { cpu, cuda };

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  static Device cpu() { return {DeviceKind::cpu, 0}; }
  static Device cuda(int index) { return {DeviceKind::cuda, index}; }
  bool operator==(const Device&) const = default;
};

// bf16 / f16 <-> f32 conversions (round to nearest even), used by casts and checkpoint I/O.
std::uint16_t f32_to_bf16(float value);
float bf16_to_f32(std::uint16_t bits);
std::uint16_t f32_to_f16(float value);
float f16_to_f32(std::uint16_t bits);

}  // namespace odc
