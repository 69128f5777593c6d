#pragma once
// Deterministic column reductions (the rmsnorm weight gradient and the bias gradient): no atomics,
// so the result is a function of the inputs and sizes only, never of the launch timing.
//
//   pass 1  partial[c, col] = sum over the rows of chunk c (kColumnChunkRows rows, ascending) of
//           term(row, col), fp32; grid (column blocks, chunks), coalesced over columns.
//   pass 2  out[col] += partial[0, col] + partial[1, col] + ... (ascending chunks), fp32, one
//           thread per column, then a single add into the accumulator.
//
// The scratch is chunks * cols fp32 (rows * cols / 16 bytes: an eighth of a bf16 [rows, cols]
// input). Private to the .cu files that include it (after cuda_runtime.h).
#include <cstdint>
#include <string>

#include "odc/core/error.h"
#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {
namespace {

constexpr int kColumnThreads = 256;
constexpr int kColumnChunkRows = 64;

inline std::int64_t chunks_for(std::int64_t rows) {
  return (rows + kColumnChunkRows - 1) / kColumnChunkRows;
}

// `Term` is a device functor: float operator()(std::int64_t row, std::int64_t col) const.
template <typename Term>
__global__ void column_partials_kernel(Term term, float* partial, std::int64_t rows,
                                       std::int64_t cols) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t row_begin = chunk * kColumnChunkRows;
  const std::int64_t row_end =
      row_begin + kColumnChunkRows < rows ? row_begin + kColumnChunkRows : rows;
  float sum = 0.0f;
  for (std::int64_t r = row_begin; r < row_end; ++r) sum += term(r, col);
  partial[chunk * cols + col] = sum;
}

__global__ void column_finish_kernel(const float* partial, float* out, std::int64_t chunks,
                                            std::int64_t cols) {
  const std::int64_t col = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  float sum = 0.0f;
  for (std::int64_t c = 0; c < chunks; ++c) sum += partial[c * cols + col];
  out[col] += sum;
}

// Bytes of fp32 scratch that column_sums_launch needs for `rows` x `cols`.
std::size_t column_scratch_bytes(std::int64_t rows, std::int64_t cols) {
  return static_cast<std::size_t>(chunks_for(rows) * cols) * sizeof(float);
}

// out[col] += sum_row term(row, col) in the fixed order above; `scratch` holds
// column_scratch_bytes(rows, cols) and is stream-ordered on `stream`.
template <typename Term>
void column_sums_launch(Term term, float* out, std::int64_t rows, std::int64_t cols, float* scratch,
                        cudaStream_t stream, const char* what) {
  if (rows <= 0 || cols <= 0) return;
  const std::int64_t chunks = chunks_for(rows);
  if (chunks > 65535) {
    throw Error(std::string(what) + ": " + std::to_string(rows) + " rows exceed the grid limit of " +
                "65535 chunks of " + std::to_string(kColumnChunkRows) + " rows");
  }
  const auto col_blocks = static_cast<unsigned>((cols + kColumnThreads - 1) / kColumnThreads);
  column_partials_kernel<<<dim3(col_blocks, static_cast<unsigned>(chunks)), kColumnThreads, 0,
                           stream>>>(term, scratch, rows, cols);
  check_last_launch("column_partials_kernel");
  column_finish_kernel<<<col_blocks, kColumnThreads, 0, stream>>>(scratch, out, chunks, cols);
  check_last_launch("column_finish_kernel");
}

}  // namespace
}  // namespace odc::kernels::cuda
