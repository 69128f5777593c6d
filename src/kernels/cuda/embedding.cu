#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "elementwise.cuh"

namespace odc::kernels::cuda {
namespace {

using elementwise::blocks_for;
using elementwise::kThreads;

// One thread per output element; consecutive threads walk one row, so both sides coalesce.
__global__ void embedding_forward_kernel(const std::int32_t* ids, const std::uint16_t* table,
                                         std::uint16_t* out, std::int64_t tokens,
                                         std::int64_t dim) {
  const std::int64_t total = tokens * dim;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = idx / dim;
    const std::int64_t i = idx - t * dim;
    out[idx] = table[static_cast<std::int64_t>(ids[t]) * dim + i];
  }
}

__global__ void embedding_backward_kernel(const std::int32_t* ids, const __nv_bfloat16* dout,
                                          float* dtable, std::int64_t tokens, std::int64_t dim) {
  const std::int64_t total = tokens * dim;
  for (std::int64_t idx = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
       idx < total; idx += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = idx / dim;
    const std::int64_t i = idx - t * dim;
    atomicAdd(dtable + static_cast<std::int64_t>(ids[t]) * dim + i, __bfloat162float(dout[idx]));
  }
}

}  // namespace

void embedding_forward(const std::int32_t* ids, const std::uint16_t* table, std::uint16_t* out,
                       std::int64_t tokens, std::int64_t dim, void* stream) {
  if (tokens <= 0 || dim <= 0) return;
  embedding_forward_kernel<<<blocks_for(tokens * dim), kThreads, 0,
                             static_cast<cudaStream_t>(stream)>>>(ids, table, out, tokens, dim);
  check_last_launch("embedding_forward_kernel");
}

void embedding_backward(const std::int32_t* ids, const std::uint16_t* dout, float* dtable,
                        std::int64_t tokens, std::int64_t dim, void* stream) {
  if (tokens <= 0 || dim <= 0) return;
  embedding_backward_kernel<<<blocks_for(tokens * dim), kThreads, 0,
                              static_cast<cudaStream_t>(stream)>>>(
      ids, reinterpret_cast<const __nv_bfloat16*>(dout), dtable, tokens, dim);
  check_last_launch("embedding_backward_kernel");
}

}  // namespace odc::kernels::cuda
