#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <string>

#include "odc/core/error.h"
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

// Owner-computes backward: warp w of block (x, y) owns columns [32 x, 32 x + 32) of the table rows
// with id % partitions == 8 y + w (partitions = 8 gridDim.y, a power of two). It scans every token
// id (staged through shared memory) and, for its own ids, adds dout[t, d] in token order, keeping
// the running row value in a register while consecutive matches share an id. No other thread
// touches these elements, so there are no atomics and the order is the CPU kernel's.
constexpr int kWarpsPerBlock = 8;
constexpr int kIdChunk = 2048;  // ids staged per pass (8 KiB of shared memory)

__global__ void embedding_backward_kernel(const std::int32_t* ids, const __nv_bfloat16* dout,
                                          float* dtable, std::int64_t tokens, std::int64_t dim) {
  __shared__ std::int32_t s_ids[kIdChunk];
  const int lane = threadIdx.x & 31;
  const unsigned partitions = gridDim.y * kWarpsPerBlock;
  const unsigned partition = blockIdx.y * kWarpsPerBlock + (threadIdx.x >> 5);
  const std::int64_t col = blockIdx.x * std::int64_t(32) + lane;
  const bool active = col < dim;
  std::int64_t current = -1;  // the table row held in `acc`
  float acc = 0.0f;
  for (std::int64_t base = 0; base < tokens; base += kIdChunk) {
    const int count = static_cast<int>(tokens - base < kIdChunk ? tokens - base : kIdChunk);
    __syncthreads();  // the previous chunk has been scanned by every warp
    for (int i = threadIdx.x; i < count; i += blockDim.x) s_ids[i] = ids[base + i];
    __syncthreads();
    for (int i = 0; i < count; ++i) {
      const std::int32_t id = s_ids[i];  // the same for the whole warp: no divergence
      if ((static_cast<unsigned>(id) & (partitions - 1)) != partition) continue;
      if (!active) continue;
      if (id != current) {
        if (current >= 0) dtable[current * dim + col] = acc;
        current = id;
        acc = dtable[current * dim + col];
      }
      acc += __bfloat162float(dout[(base + i) * dim + col]);
    }
  }
  if (active && current >= 0) dtable[current * dim + col] = acc;
}

// Partitions (a power of two, 8..64) so that about 2048 warps share the scan.
unsigned partitions_for(std::int64_t column_groups) {
  unsigned p = kWarpsPerBlock;
  while (p < 64 && static_cast<std::int64_t>(p) * column_groups < 2048) p <<= 1;
  return p;
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
  const std::int64_t column_groups = (dim + 31) / 32;
  if (column_groups > 0x7fffffff) {
    throw Error("embedding_backward: dim " + std::to_string(dim) + " exceeds the grid limit");
  }
  const unsigned partitions = partitions_for(column_groups);
  const dim3 grid(static_cast<unsigned>(column_groups), partitions / kWarpsPerBlock);
  embedding_backward_kernel<<<grid, kWarpsPerBlock * 32, 0, static_cast<cudaStream_t>(stream)>>>(
      ids, reinterpret_cast<const __nv_bfloat16*>(dout), dtable, tokens, dim);
  check_last_launch("embedding_backward_kernel");
}

}  // namespace odc::kernels::cuda
