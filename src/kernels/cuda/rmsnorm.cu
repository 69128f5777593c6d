#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "odc/kernels/cuda_device.h"
#include "odc/kernels/cuda_ops.h"
#include "column_sums.cuh"

namespace odc::kernels::cuda {
namespace {

constexpr int kThreads = 256;          // per row (a multiple of 32)

// Sum of v over the block; every thread gets the result. blockDim.x must be a multiple of 32.
__device__ float block_sum(float v, float* shared) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int warps = blockDim.x >> 5;
  if (warp == 0) {
    v = lane < warps ? shared[lane] : 0.0f;
    for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    if (lane == 0) shared[0] = v;
  }
  __syncthreads();
  const float total = shared[0];
  __syncthreads();  // shared may be reused by the caller
  return total;
}

// One block per row.
__global__ void rmsnorm_forward_kernel(const __nv_bfloat16* x, const __nv_bfloat16* weight,
                                       __nv_bfloat16* y, float* rstd, std::int64_t dim, float eps) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x;
  const __nv_bfloat16* xr = x + row * dim;
  __nv_bfloat16* yr = y + row * dim;
  float sum = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float v = __bfloat162float(xr[i]);
    sum += v * v;
  }
  const float total = block_sum(sum, shared);
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  if (threadIdx.x == 0) rstd[row] = inv;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    yr[i] = __float2bfloat16_rn(__bfloat162float(xr[i]) * inv * __bfloat162float(weight[i]));
  }
}

// The term of dweight[c] = sum_r dy[r,c] * (x[r,c] * rstd[r]) (column_sums.cuh reduces it).
struct DweightTerm {
  const __nv_bfloat16* dy;
  const __nv_bfloat16* x;
  const float* rstd;
  std::int64_t dim;
  __device__ float operator()(std::int64_t r, std::int64_t c) const {
    return __bfloat162float(dy[r * dim + c]) * (__bfloat162float(x[r * dim + c]) * rstd[r]);
  }
};

// One block per row: dx = rstd*w*dy - rstd^3 * sum(w*dy*x)/dim * x.
__global__ void rmsnorm_dx_kernel(const __nv_bfloat16* dy, const __nv_bfloat16* x,
                                  const __nv_bfloat16* weight, const float* rstd,
                                  __nv_bfloat16* dx, std::int64_t dim, bool dx_accumulate) {
  __shared__ float shared[32];
  const std::int64_t row = blockIdx.x;
  const __nv_bfloat16* dyr = dy + row * dim;
  const __nv_bfloat16* xr = x + row * dim;
  __nv_bfloat16* dxr = dx + row * dim;
  float dot = 0.0f;
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    dot += __bfloat162float(dyr[i]) * __bfloat162float(weight[i]) * __bfloat162float(xr[i]);
  }
  // block_sum synchronizes: all of dy is read before any dx is written (dx may alias dy).
  const float total = block_sum(dot, shared);
  const float inv = rstd[row];
  const float coef = inv * inv * inv * total / static_cast<float>(dim);
  for (std::int64_t i = threadIdx.x; i < dim; i += blockDim.x) {
    const float g = __bfloat162float(dyr[i]);
    float grad = inv * __bfloat162float(weight[i]) * g - coef * __bfloat162float(xr[i]);
    if (dx_accumulate) grad += __bfloat162float(dxr[i]);
    dxr[i] = __float2bfloat16_rn(grad);
  }
}

int threads_for(std::int64_t dim) {
  // Small rows use fewer threads (multiple of 32, at most kThreads).
  const std::int64_t t = (dim + 31) / 32 * 32;
  return static_cast<int>(t < kThreads ? (t > 0 ? t : 32) : kThreads);
}

}  // namespace

void rmsnorm_forward(const std::uint16_t* x, const std::uint16_t* weight, std::uint16_t* y,
                     float* rstd, std::int64_t rows, std::int64_t dim, double eps, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  rmsnorm_forward_kernel<<<static_cast<unsigned>(rows), threads_for(dim), 0,
                           static_cast<cudaStream_t>(stream)>>>(
      reinterpret_cast<const __nv_bfloat16*>(x), reinterpret_cast<const __nv_bfloat16*>(weight),
      reinterpret_cast<__nv_bfloat16*>(y), rstd, dim, static_cast<float>(eps));
  check_last_launch("rmsnorm_forward_kernel");
}

std::size_t rmsnorm_backward_workspace_bytes(std::int64_t rows, std::int64_t dim) {
  return rows <= 0 || dim <= 0 ? 0 : column_scratch_bytes(rows, dim);
}

void rmsnorm_backward(const std::uint16_t* dy, const std::uint16_t* x, const std::uint16_t* weight,
                      const float* rstd, std::uint16_t* dx, float* dweight, std::int64_t rows,
                      std::int64_t dim, bool dx_accumulate, DeviceAllocator& allocator,
                      void* stream) {
  if (rows <= 0 || dim <= 0) return;
  DeviceBuffer scratch(allocator, rmsnorm_backward_workspace_bytes(rows, dim), stream);
  rmsnorm_backward(dy, x, weight, rstd, dx, dweight, rows, dim, dx_accumulate,
                   scratch.as<float>(), stream);
}

void rmsnorm_backward(const std::uint16_t* dy, const std::uint16_t* x, const std::uint16_t* weight,
                      const float* rstd, std::uint16_t* dx, float* dweight, std::int64_t rows,
                      std::int64_t dim, bool dx_accumulate, float* workspace, void* stream) {
  if (rows <= 0 || dim <= 0) return;
  const auto* dyb = reinterpret_cast<const __nv_bfloat16*>(dy);
  const auto* xb = reinterpret_cast<const __nv_bfloat16*>(x);
  const auto s = static_cast<cudaStream_t>(stream);
  // dweight first: it reads dy, which the dx kernel may overwrite (dx may alias dy).
  column_sums_launch(DweightTerm{dyb, xb, rstd, dim}, dweight, rows, dim, workspace, s,
                     "rmsnorm_backward");
  rmsnorm_dx_kernel<<<static_cast<unsigned>(rows), threads_for(dim), 0, s>>>(
      dyb, xb, reinterpret_cast<const __nv_bfloat16*>(weight), rstd,
      reinterpret_cast<__nv_bfloat16*>(dx), dim, dx_accumulate);
  check_last_launch("rmsnorm_dx_kernel");
}

}  // namespace odc::kernels::cuda
