#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

// Grid-stride loops: one launch covers any n without exceeding grid limits.
__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __float2bfloat16_rn(in[i]);
  }
}

__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = __bfloat162float(in[i]);
  }
}

__global__ void fill_kernel(float* out, float value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

__global__ void add_kernel(float* acc, const float* in, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    acc[i] += in[i];
  }
}

}  // namespace

void add_f32(float* acc, const float* in, std::int64_t n, void* stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(acc, in, n);
}

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n, void* stream) {
  f32_to_bf16_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      in, reinterpret_cast<__nv_bfloat16*>(out), n);
}

void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n, void* stream) {
  bf16_to_f32_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(in), out, n);
}

void fill_f32(float* out, float value, std::int64_t n, void* stream) {
  fill_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(out, value, n);
}

int device_count(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(status);
    return 0;
  }
  return count;
}

std::int64_t device_total_memory(int device) {
  int current = 0;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  check_cuda(cudaSetDevice(device), "cudaSetDevice");
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  const cudaError_t status = cudaMemGetInfo(&free_bytes, &total_bytes);
  check_cuda(cudaSetDevice(current), "cudaSetDevice");
  check_cuda(status, "cudaMemGetInfo");
  return static_cast<std::int64_t>(total_bytes);
}

}  // namespace odc::kernels::cuda
