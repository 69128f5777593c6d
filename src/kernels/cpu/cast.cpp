#include "odc/kernels/cast.h"

#include "odc/core/dtype.h"

namespace odc::kernels::cpu {

// The element conversions live in core/dtype.cpp (one rounding rule for casts and checkpoint I/O).

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}

void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}

void cast_f32_to_f16(const float* in, std::uint16_t* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f32_to_f16(in[i]);
}

void cast_f16_to_f32(const std::uint16_t* in, float* out, std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(in[i]);
}

}  // namespace odc::kernels::cpu
