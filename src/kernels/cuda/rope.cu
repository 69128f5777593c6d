#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

// One thread per (token, head, i < half) pair; rotates by +angle (sign 1) or -angle (sign -1).
__global__ void rope_kernel(__nv_bfloat16* x, const float* cos_table, const float* sin_table,
                            std::int64_t tokens, int heads, int head_dim, float sign) {
  const std::int64_t half = head_dim / 2;
  const std::int64_t total = tokens * heads * half;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t i = idx % half;
    const std::int64_t token_head = idx / half;
    const std::int64_t t = token_head / heads;
    __nv_bfloat16* lo = x + token_head * head_dim;
    __nv_bfloat16* hi = lo + half;
    const float c = cos_table[t * half + i];
    const float s = sign * sin_table[t * half + i];
    const float a = __bfloat162float(lo[i]);
    const float b = __bfloat162float(hi[i]);
    lo[i] = __float2bfloat16_rn(a * c - b * s);
    hi[i] = __float2bfloat16_rn(b * c + a * s);
  }
}

void launch(std::uint16_t* x, const float* cos_table, const float* sin_table, std::int64_t tokens,
            int heads, int head_dim, float sign, void* stream) {
  const std::int64_t total = tokens * heads * (head_dim / 2);
  if (total <= 0) return;
  rope_kernel<<<blocks_for(total), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<__nv_bfloat16*>(x), cos_table, sin_table, tokens, heads, head_dim, sign);
  check_last_launch("rope_kernel");
}

}  // namespace

void rope_forward(std::uint16_t* x, const float* cos_table, const float* sin_table,
                  std::int64_t tokens, int heads, int head_dim, void* stream) {
  launch(x, cos_table, sin_table, tokens, heads, head_dim, 1.0f, stream);
}

void rope_backward(std::uint16_t* dx, const float* cos_table, const float* sin_table,
                   std::int64_t tokens, int heads, int head_dim, void* stream) {
  launch(dx, cos_table, sin_table, tokens, heads, head_dim, -1.0f, stream);
}

}  // namespace odc::kernels::cuda
