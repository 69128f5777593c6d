#pragma once
// CUDA element-type conversions and fills (built when the CUDA backend is enabled). The mixed-
// precision path casts fp32 master shards to bf16 compute weights with these. `stream` is a
// cudaStream_t (passed as void* so that host-only code can include this header).
#include <cstdint>
#include <string>

namespace odc::kernels::cuda {

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n, void* stream);
void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n, void* stream);
void fill_f32(float* out, float value, std::int64_t n, void* stream);
// acc[i] += in[i] in fp32 (a gradient slice into its owner's accumulator; in order per stream).
void add_f32(float* acc, const float* in, std::int64_t n, void* stream);

// Number of visible CUDA devices; 0 (with `why` set) when there is no usable driver or device.
int device_count(std::string* why);
// Total memory of device `device` in bytes (cudaMemGetInfo on it; the current device is restored).
std::int64_t device_total_memory(int device);

}  // namespace odc::kernels::cuda
