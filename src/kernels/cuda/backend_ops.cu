// The CUDA backend's helper kernels (cuda_backend_ops.h).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>

#include "odc/core/error.h"
#include "odc/kernels/cuda_backend_ops.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kReduceBlocks = 512;  // fixed: the summation order depends only on n

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// One block per row, 2-byte units (bf16 and fp32 rows are both whole units).
__global__ void gather_rows_kernel(const std::uint16_t* source, const std::int32_t* rows, std::int64_t units,
                                   std::uint16_t* target) {
  const std::int64_t i = blockIdx.x;
  const std::uint16_t* from = source + static_cast<std::int64_t>(rows[i]) * units;
  std::uint16_t* to = target + i * units;
  for (std::int64_t j = threadIdx.x; j < units; j += blockDim.x) to[j] = from[j];
}

__global__ void scatter_rows_kernel(const std::uint16_t* source, const std::int32_t* rows, std::int64_t units,
                                    std::uint16_t* target) {
  const std::int64_t i = blockIdx.x;
  const std::uint16_t* from = source + i * units;
  std::uint16_t* to = target + static_cast<std::int64_t>(rows[i]) * units;
  for (std::int64_t j = threadIdx.x; j < units; j += blockDim.x) to[j] = from[j];
}

__global__ void scale_bf16_kernel(__nv_bfloat16* x, std::int64_t n, float alpha) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    x[i] = __float2bfloat16_rn(__bfloat162float(x[i]) * alpha);
  }
}

__global__ void add_bf16_kernel(__nv_bfloat16* acc, const __nv_bfloat16* in, std::int64_t n) {
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    acc[i] = __float2bfloat16_rn(__bfloat162float(acc[i]) + __bfloat162float(in[i]));
  }
}

__global__ void rope_tables_kernel(const std::int32_t* positions, std::int64_t tokens, const double* inv_freq,
                                   std::int64_t half, float* cos_table, float* sin_table) {
  const std::int64_t n = tokens * half;
  for (std::int64_t e = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; e < n;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t t = e / half;
    const double angle = static_cast<double>(positions[t]) * inv_freq[e - t * half];
    cos_table[e] = static_cast<float>(cos(angle));
    sin_table[e] = static_cast<float>(sin(angle));
  }
}

// Tree reduction of one value per thread in shared memory (fixed order).
__device__ double block_sum(double v) {
  __shared__ double part[kThreads];
  part[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (static_cast<int>(threadIdx.x) < stride) part[threadIdx.x] += part[threadIdx.x + stride];
    __syncthreads();
  }
  return part[0];
}

__global__ void squares_partials_kernel(const float* x, std::int64_t n, double* partials) {
  double acc = 0.0;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(kThreads) + threadIdx.x; i < n;
       i += static_cast<std::int64_t>(kReduceBlocks) * kThreads) {
    const double v = x[i];
    acc += v * v;
  }
  const double s = block_sum(acc);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_partials_kernel(const double* partials, std::int64_t n, double* out, bool accumulate) {
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += kThreads) acc += partials[i];
  const double s = block_sum(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

__global__ void sum_f32_kernel(const float* values, std::int64_t n, double* out, bool accumulate) {
  double acc = 0.0;
  for (std::int64_t i = threadIdx.x; i < n; i += kThreads) acc += static_cast<double>(values[i]);
  const double s = block_sum(acc);
  if (threadIdx.x == 0) *out = accumulate ? *out + s : s;
}

void check_rows(std::int64_t n_rows, std::int64_t row_bytes, const char* what) {
  if (n_rows < 0 || row_bytes < 0 || row_bytes % 2 != 0) {
    fail("{}: invalid rows {} of {} bytes (rows must be whole 2-byte units)", what, n_rows, row_bytes);
  }
}

}  // namespace

void gather_rows(const void* source, const std::int32_t* rows, std::int64_t n_rows, std::int64_t row_bytes,
                 void* target, void* stream) {
  check_rows(n_rows, row_bytes, "cuda gather_rows");
  if (n_rows == 0 || row_bytes == 0) return;
  gather_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, as_stream(stream)>>>(
      static_cast<const std::uint16_t*>(source), rows, row_bytes / 2, static_cast<std::uint16_t*>(target));
  check_last_launch("gather_rows_kernel");
}

void scatter_rows(const void* source, const std::int32_t* rows, std::int64_t n_rows, std::int64_t row_bytes,
                  void* target, void* stream) {
  check_rows(n_rows, row_bytes, "cuda scatter_rows");
  if (n_rows == 0 || row_bytes == 0) return;
  scatter_rows_kernel<<<static_cast<unsigned>(n_rows), kThreads, 0, as_stream(stream)>>>(
      static_cast<const std::uint16_t*>(source), rows, row_bytes / 2, static_cast<std::uint16_t*>(target));
  check_last_launch("scatter_rows_kernel");
}

void add_bf16(void* acc, const void* in, std::int64_t n, void* stream) {
  ODC_CHECK(n >= 0, "cuda add_bf16: negative count {}", n);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 4096));
  add_bf16_kernel<<<blocks, kThreads, 0, as_stream(stream)>>>(static_cast<__nv_bfloat16*>(acc),
                                                              static_cast<const __nv_bfloat16*>(in), n);
  check_last_launch("add_bf16_kernel");
}

void scale_bf16(void* x, std::int64_t n, float alpha, void* stream) {
  ODC_CHECK(n >= 0, "cuda scale_bf16: negative count {}", n);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 4096));
  scale_bf16_kernel<<<blocks, kThreads, 0, as_stream(stream)>>>(static_cast<__nv_bfloat16*>(x), n, alpha);
  check_last_launch("scale_bf16_kernel");
}

void rope_tables(const std::int32_t* positions, std::int64_t tokens, const double* inv_freq, std::int64_t half,
                 float* cos_table, float* sin_table, void* stream) {
  const std::int64_t n = tokens * half;
  if (n <= 0) return;
  const auto blocks = static_cast<unsigned>(std::min<std::int64_t>((n + kThreads - 1) / kThreads, 4096));
  rope_tables_kernel<<<blocks, kThreads, 0, as_stream(stream)>>>(positions, tokens, inv_freq, half, cos_table,
                                                                  sin_table);
  check_last_launch("rope_tables_kernel");
}

std::int64_t sum_of_squares_scratch() { return kReduceBlocks; }

void sum_of_squares(const float* x, std::int64_t n, double* scratch, double* out, void* stream) {
  ODC_CHECK(n >= 0, "cuda sum_of_squares: negative count {}", n);
  squares_partials_kernel<<<kReduceBlocks, kThreads, 0, as_stream(stream)>>>(x, n, scratch);
  check_last_launch("squares_partials_kernel");
  sum_partials_kernel<<<1, kThreads, 0, as_stream(stream)>>>(scratch, kReduceBlocks, out, false);
  check_last_launch("sum_partials_kernel");
}

void sum_f32(const float* values, std::int64_t n, double* out, bool accumulate, void* stream) {
  ODC_CHECK(n >= 0, "cuda sum_f32: negative count {}", n);
  sum_f32_kernel<<<1, kThreads, 0, as_stream(stream)>>>(values, n, out, accumulate);
  check_last_launch("sum_f32_kernel");
}

}  // namespace odc::kernels::cuda
