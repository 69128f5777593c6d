#pragma once
// Dense matrix products (CPU: oneDNN fp32 sgemm). Row-major throughout. A linear layer follows the
// Hugging Face / PyTorch convention: weight W has shape [out, in] and y = x W^T + b.
#include <cstdint>
#include <string>

namespace odc::kernels::cpu {

// C[M,N] = alpha * op(A) * op(B) + beta * C, row-major; op(X) = X^T when trans_X.
// lda/ldb/ldc are the row strides of A, B, C as stored.
template <typename T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c, std::int64_t ldc);

// y[rows,out] = x[rows,in] * W[out,in]^T (+ bias[out] if bias != nullptr).
template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, T* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out);

// Backward of linear_forward.
//   dx[rows,in]   = dy * W            (overwritten when dx_accumulate is false, else added)
//   dweight[out,in] += dy^T * x       (always accumulated)
//   dbias[out]      += sum_rows dy    (skipped when dbias == nullptr)
// dx may be nullptr (no input gradient wanted).
template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, T* dx, T* dweight, T* dbias,
                     std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate);

// Sets the number of threads the CPU kernels (GEMMs) may use.
void set_num_threads(int threads);
int num_threads();

// Which GEMM implementation runs, for the start-up log and benchmark records.
struct GemmInfo {
  std::string library;  // e.g. "oneDNN 2.6.3"
  // The instruction set the library dispatches to on this CPU, in oneDNN's names: "sse41",
  // "avx", "avx2", "avx2_vnni", "avx512_core", "avx512_core_vnni", "avx512_core_bf16",
  // "avx512_core_fp16", "avx512_core_amx"; "unknown" when the library cannot say.
  std::string isa;
  std::string kernel;   // the implementation picked for a model-shaped fp32 product
};
GemmInfo gemm_info();

}  // namespace odc::kernels::cpu
