#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_cast.h"
#include "odc/kernels/cuda_device.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

using elementwise::aligned16;
using elementwise::for_each;
using elementwise::load8;
using elementwise::Pack8;
using elementwise::store8;

// Grid-stride loops: one launch covers any n without exceeding grid limits; kVec moves 8
// elements per step in 16-byte accesses (elementwise.cuh).
template <bool kVec>
__global__ void f32_to_bf16_kernel(const float* in, __nv_bfloat16* out, std::int64_t n) {
  for_each<kVec>(
      n,
      [&](std::int64_t i) {
        const Pack8<float> x = load8(in + i);
        Pack8<__nv_bfloat16> y;
        for (int j = 0; j < elementwise::kVecWidth; ++j) y.v[j] = __float2bfloat16_rn(x.v[j]);
        store8(out + i, y);
      },
      [&](std::int64_t i) { out[i] = __float2bfloat16_rn(in[i]); });
}

template <bool kVec>
__global__ void bf16_to_f32_kernel(const __nv_bfloat16* in, float* out, std::int64_t n) {
  for_each<kVec>(
      n,
      [&](std::int64_t i) {
        const Pack8<__nv_bfloat16> x = load8(in + i);
        Pack8<float> y;
        for (int j = 0; j < elementwise::kVecWidth; ++j) y.v[j] = __bfloat162float(x.v[j]);
        store8(out + i, y);
      },
      [&](std::int64_t i) { out[i] = __bfloat162float(in[i]); });
}

__global__ void fill_kernel(float* out, float value, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    out[i] = value;
  }
}

template <bool kVec>
__global__ void add_kernel(float* acc, const float* in, std::int64_t n) {
  for_each<kVec>(
      n,
      [&](std::int64_t i) {
        Pack8<float> a = load8(acc + i);
        const Pack8<float> x = load8(in + i);
        for (int j = 0; j < elementwise::kVecWidth; ++j) a.v[j] += x.v[j];
        store8(acc + i, a);
      },
      [&](std::int64_t i) { acc[i] += in[i]; });
}

}  // namespace

void add_f32(float* acc, const float* in, std::int64_t n, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  if (aligned16(acc) && aligned16(in)) {
    add_kernel<true><<<blocks_for(n, true), kThreads, 0, s>>>(acc, in, n);
  } else {
    add_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(acc, in, n);
  }
}

void cast_f32_to_bf16(const float* in, std::uint16_t* out, std::int64_t n, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  auto* o = reinterpret_cast<__nv_bfloat16*>(out);
  if (aligned16(in) && aligned16(out)) {
    f32_to_bf16_kernel<true><<<blocks_for(n, true), kThreads, 0, s>>>(in, o, n);
  } else {
    f32_to_bf16_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(in, o, n);
  }
}

void cast_bf16_to_f32(const std::uint16_t* in, float* out, std::int64_t n, void* stream) {
  if (n == 0) return;
  const auto s = static_cast<cudaStream_t>(stream);
  const auto* i = reinterpret_cast<const __nv_bfloat16*>(in);
  if (aligned16(in) && aligned16(out)) {
    bf16_to_f32_kernel<true><<<blocks_for(n, true), kThreads, 0, s>>>(i, out, n);
  } else {
    bf16_to_f32_kernel<false><<<blocks_for(n), kThreads, 0, s>>>(i, out, n);
  }
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
