#pragma once
// Element-type conversions and fills (CPU; the CUDA versions live in kernels/cuda/cast.cuh).
#include <cstdint>

namespace odc::kernels::cpu {

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n);
void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n);
void cast_f32_to_f16(const float* in, std::uint16_t* out, std::int64_t n);
void cast_f16_to_f32(const std::uint16_t* in, float* out, std::int64_t n);

}  // namespace odc::kernels::cpu
