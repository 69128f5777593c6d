#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

// 1 / (1 + exp(-g)): expf overflows to inf for very negative g, giving 0 (not NaN).
__device__ __forceinline__ float sigmoid(float g) { return 1.0f / (1.0f + expf(-g)); }

__global__ void swiglu_forward_kernel(const __nv_bfloat16* gate, const __nv_bfloat16* up,
                                      __nv_bfloat16* h, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float g = __bfloat162float(gate[i]);
    h[i] = __float2bfloat16_rn(g * sigmoid(g) * __bfloat162float(up[i]));
  }
}

// d silu(g)/dg = s * (1 + g*(1-s)), s = sigmoid(g).
__global__ void swiglu_backward_kernel(const __nv_bfloat16* dh, const __nv_bfloat16* gate,
                                       const __nv_bfloat16* up, __nv_bfloat16* dgate,
                                       __nv_bfloat16* dup, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float d = __bfloat162float(dh[i]);
    const float g = __bfloat162float(gate[i]);
    const float u = __bfloat162float(up[i]);
    const float s = sigmoid(g);
    // All inputs are read before either output is written (outputs may alias dh).
    dup[i] = __float2bfloat16_rn(d * g * s);
    dgate[i] = __float2bfloat16_rn(d * u * s * (1.0f + g * (1.0f - s)));
  }
}

}  // namespace

void swiglu_forward(const std::uint16_t* gate, const std::uint16_t* up, std::uint16_t* h,
                    std::int64_t n, void* stream) {
  if (n <= 0) return;
  swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(gate), reinterpret_cast<const __nv_bfloat16*>(up),
      reinterpret_cast<__nv_bfloat16*>(h), n);
  check_last_launch("swiglu_forward_kernel");
}

void swiglu_backward(const std::uint16_t* dh, const std::uint16_t* gate, const std::uint16_t* up,
                     std::uint16_t* dgate, std::uint16_t* dup, std::int64_t n, void* stream) {
  if (n <= 0) return;
  swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(dh), reinterpret_cast<const __nv_bfloat16*>(gate),
      reinterpret_cast<const __nv_bfloat16*>(up), reinterpret_cast<__nv_bfloat16*>(dgate),
      reinterpret_cast<__nv_bfloat16*>(dup), n);
  check_last_launch("swiglu_backward_kernel");
}

}  // namespace odc::kernels::cuda
