#pragma once
// cuBLASLt matrix products for the CUDA backend (built when the CUDA backend is enabled): a general
// row-major bf16 GEMM and the linear layer of matmul.h (weight W[out, in], y = x W^T + b) with its
// backward. CUDA/cuBLAS types are hidden so that host-only code can include this header; every
// pointer is a device pointer and `stream` is a cudaStream_t (nullptr = legacy default stream).
//
// Precision: A and B are bf16 (std::uint16_t bit patterns); products accumulate in fp32
// (CUBLAS_COMPUTE_32F, fp32 alpha/beta); C/D is bf16 or fp32. Parameter gradients (dweight, dbias)
// are fp32 accumulators, as the fp32 gradient shards they feed.
//
// Row-major <-> cuBLAS column-major. A row-major matrix M[r, c] with row stride ld is, byte for
// byte, the column-major matrix M^T[c, r] with leading dimension ld. So the row-major product
//     C[m, n] = op(A)[m, k] * op(B)[k, n]
// is the column-major product of the transposes,
//     C^T[n, m] = op(B)^T[n, k] * op(A)^T[k, m],
// which cuBLAS computes when given B as its first operand and A as its second, with the same
// transpose flags, sizes (n, m, k) and the same leading dimensions (ldb, lda, ldc). For example
// linear_forward, y = x W^T (row-major, W stored [out, in]), is the column-major
// y^T[out, rows] = W'^T * x' where W' = W^T[in, out] and x' = x^T[in, rows] are the stored
// column-major views: the "TN" GEMM (transa = T on W, transb = N on x), m' = out, n' = rows,
// k' = in, lda' = ldb' = in, ldc' = out.
//
// Descriptors and the heuristic's algorithm are cached per (shape, transposes, leading dimensions,
// types, epilogue, pointer alignments) in the Blas handle: the heuristic query costs tens of
// microseconds, a lookup does not.
//
// Determinism: cuBLASLt gives bitwise identical results for the same algorithm, sizes and GPU
// (its split-K reductions are sequential, not atomic); the algorithm is a function of the cache
// key, whose pointer alignments depend only on offsets since allocations are 256-byte aligned.
// The bias column sums use no atomics either (fixed-order two-pass reduction, below).
#include <cstddef>
#include <cstdint>
#include <memory>

#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

// Throws odc::Error naming `what` and the cuBLAS status name and text unless status is
// CUBLAS_STATUS_SUCCESS. `status` is a cublasStatus_t (passed as int to keep this header CUDA-free).
void check_cublas(int status, const char* what);

// A cuBLASLt handle, its workspace and the per-shape descriptor/algorithm cache.
//
// The workspace is shared by every call on this handle: matmuls issued on different streams must
// not run concurrently on one Blas (use one Blas per stream). Calls are serialized by an internal
// mutex, so one Blas may be used from several host threads.
class Blas {
 public:
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t(32) << 20;  // 32 MiB

  // Creates the cuBLASLt handle and cudaMallocs the workspace once (on the current device).
  explicit Blas(std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~Blas();
  Blas(const Blas&) = delete;
  Blas& operator=(const Blas&) = delete;
  Blas(Blas&&) noexcept;
  Blas& operator=(Blas&&) noexcept;

  std::size_t workspace_bytes() const;
  // Number of cached (descriptor, algorithm) entries: one per distinct GEMM configuration.
  std::size_t cached_plans() const;

  // The handle, workspace and cache; defined in gemm.cu and used only there.
  struct Impl;
  Impl& impl() const { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// Element type of a GEMM's C/D matrix.
enum class GemmOut : std::uint8_t { bf16, f32 };

// C[m,n] = alpha * op(A) * op(B) + beta * C, row-major as cpu::gemm (matmul.h); op(X) = X^T when
// trans_X. A and B are bf16; C is bf16 or fp32 (c_type), read only when beta != 0. lda/ldb/ldc are
// the row strides as stored (lda >= k when !trans_a, >= m when trans_a; likewise ldb; ldc >= n).
// k == 0 scales C by beta. Throws odc::Error on invalid sizes or a failing cuBLASLt call.
void gemm(Blas& blas, bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
          float alpha, const std::uint16_t* a, std::int64_t lda, const std::uint16_t* b,
          std::int64_t ldb, float beta, void* c, std::int64_t ldc, GemmOut c_type, void* stream);

// y[rows,out] = x[rows,in] * W[out,in]^T (+ bias[out] when bias != nullptr), all bf16. The bias
// is fused into the GEMM (CUBLASLT_EPILOGUE_BIAS, added in fp32 before the bf16 rounding); when
// cuBLASLt offers no algorithm with that epilogue for the shape, y is seeded with the bias and the
// GEMM adds onto it (beta = 1), as cpu::linear_forward does.
void linear_forward(Blas& blas, const std::uint16_t* x, const std::uint16_t* weight,
                    const std::uint16_t* bias, std::uint16_t* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out, void* stream);

// y[rows,out] = residual[rows,out] + x[rows,in] * W[out,in]^T, all bf16: the residual add in the
// GEMM's epilogue (cuBLASLt reads C = residual, writes D = y; beta 1), bitwise what copying the
// residual into y and adding the product onto it (gemm with beta 1) gives. y may be residual; it
// must not alias x or W.
void linear_forward_residual(Blas& blas, const std::uint16_t* x, const std::uint16_t* weight,
                             const std::uint16_t* residual, std::uint16_t* y, std::int64_t rows,
                             std::int64_t in, std::int64_t out, void* stream);

// Backward of linear_forward (matmul.h's linear_backward):
//   dx[rows,in]      = dy * W        bf16; overwritten (beta 0) unless dx_accumulate (beta 1).
//                                    Skipped when dx == nullptr.
//   dweight[out,in] += dy^T * x      fp32 accumulator (bf16 A/B, fp32 C/D, beta 1). Skipped when
//                                    dweight_f32 == nullptr (frozen weight).
//   dbias[out]      += sum_rows dy   fp32 accumulator, by column_sums_accumulate (cuBLASLt's
//                                    BGRADB epilogue overwrites instead of accumulating). Skipped
//                                    when dbias_f32 == nullptr; its scratch comes from `allocator`
//                                    on `stream` (unused when dbias_f32 == nullptr).
// dx must not alias dy, x or weight.
void linear_backward(Blas& blas, const std::uint16_t* dy, const std::uint16_t* x,
                     const std::uint16_t* weight, std::uint16_t* dx, float* dweight_f32,
                     float* dbias_f32, std::int64_t rows, std::int64_t in, std::int64_t out,
                     bool dx_accumulate, DeviceAllocator& allocator, void* stream);

// dbias[cols] += column sums of dy[rows, cols] (bf16 in, fp32), deterministic: partial sums over
// fixed 64-row chunks (rows ascending) into an fp32 scratch [chunks, cols], then the chunks summed
// in ascending order and added to dbias once. The order depends only on rows and cols, so the
// result is bitwise reproducible. rows <= 65535 * 64.
// Scratch: column_sums_workspace_bytes(rows, cols) = ceil(rows / 64) * cols * 4 bytes, either
// allocated from `allocator` on `stream` or given as `workspace` (device memory that `stream`
// may use; free again once the call's work on `stream` has run).
std::size_t column_sums_workspace_bytes(std::int64_t rows, std::int64_t cols);
void column_sums_accumulate(const std::uint16_t* dy, float* dbias, std::int64_t rows,
                            std::int64_t cols, DeviceAllocator& allocator, void* stream);
void column_sums_accumulate(const std::uint16_t* dy, float* dbias, std::int64_t rows,
                            std::int64_t cols, float* workspace, void* stream);

}  // namespace odc::kernels::cuda
