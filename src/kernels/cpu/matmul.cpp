#include "odc/kernels/matmul.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "odc/core/error.h"

// fp32 products run on oneDNN's sgemm: it picks its kernels from the CPU's features (cpuid), not
// from a table of known processor models, so a new CPU gets its vector units (a distribution
// OpenBLAS that does not know the model falls back to SSE3 kernels, 5-7x slower). Its row-major
// sgemm takes any shape with no per-shape set-up, which suits ragged microbatches: the matmul
// primitive would need a primitive (JIT code) per (rows, keys) shape, and cached per shape it
// measured no faster (bench/gemm.cpp). Sizes are 64-bit (dnnl_dim_t): no 32-bit limit.
//
// float64 (the finite-difference and oracle tests only) runs on a small blocked loop here.

namespace odc::kernels::cpu {
namespace {

template <typename T>
void scale_rows(std::int64_t m, std::int64_t n, T beta, T* c, std::int64_t ldc) {
  for (std::int64_t i = 0; i < m; ++i) {
    T* row = c + i * ldc;
    if (beta == T(0)) {
      std::fill(row, row + n, T(0));
    } else if (beta != T(1)) {
      for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
    }
  }
}

// C = alpha op(A) op(B) + beta C in float64 by loops ordered for unit-stride inner products.
void gemm_f64(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
              double alpha, const double* a, std::int64_t lda, const double* b, std::int64_t ldb,
              double beta, double* c, std::int64_t ldc) {
  scale_rows(m, n, beta, c, ldc);
  const auto at = [&](std::int64_t i, std::int64_t p) { return trans_a ? a[p * lda + i] : a[i * lda + p]; };
  if (!trans_b) {
    // Row i of C accumulates alpha A(i, p) * row p of B: unit stride over j.
    for (std::int64_t i = 0; i < m; ++i) {
      double* __restrict ci = c + i * ldc;
      for (std::int64_t p = 0; p < k; ++p) {
        const double s = alpha * at(i, p);
        const double* __restrict bp = b + p * ldb;
        for (std::int64_t j = 0; j < n; ++j) ci[j] += s * bp[j];
      }
    }
    return;
  }
  // op(B)(p, j) = B[j, p]: C(i, j) is a dot product of row i of op(A) with row j of B.
  std::vector<double> row(static_cast<std::size_t>(k));
  for (std::int64_t i = 0; i < m; ++i) {
    for (std::int64_t p = 0; p < k; ++p) row[static_cast<std::size_t>(p)] = at(i, p);
    for (std::int64_t j = 0; j < n; ++j) {
      const double* __restrict bj = b + j * ldb;
      double sum = 0.0;
      for (std::int64_t p = 0; p < k; ++p) sum += row[static_cast<std::size_t>(p)] * bj[p];
      c[i * ldc + j] += alpha * sum;
    }
  }
}

void check_strides(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k,
                   std::int64_t lda, std::int64_t ldb, std::int64_t ldc) {
  ODC_CHECK(m >= 0 && n >= 0 && k >= 0, "gemm sizes m {} n {} k {}", m, n, k);
  ODC_CHECK(lda >= std::max<std::int64_t>(1, trans_a ? m : k), "gemm lda {} for {} A, m {} k {}",
            lda, trans_a ? "transposed" : "plain", m, k);
  ODC_CHECK(ldb >= std::max<std::int64_t>(1, trans_b ? k : n), "gemm ldb {} for {} B, k {} n {}",
            ldb, trans_b ? "transposed" : "plain", k, n);
  ODC_CHECK(ldc >= std::max<std::int64_t>(1, n), "gemm ldc {} < n {}", ldc, n);
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // Nothing to multiply; the strides of A and B are unused and not checked.
    ODC_CHECK(ldc >= n, "gemm ldc {} < n {}", ldc, n);
    scale_rows(m, n, beta, c, ldc);
    return;
  }
  check_strides(trans_a, trans_b, m, n, k, lda, ldb, ldc);
  if constexpr (std::is_same_v<T, float>) {
    const dnnl_status_t status = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', m, n, k,
                                            alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success) {
      fail("oneDNN sgemm failed (status {}) for m {} n {} k {} lda {} ldb {} ldc {}",
           static_cast<int>(status), m, n, k, lda, ldb, ldc);
    }
  } else {
    gemm_f64(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
  }
}

template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, T* y, std::int64_t rows,
                    std::int64_t in, std::int64_t out) {
  if (bias != nullptr) {
    // Seed y with the bias so the GEMM adds onto it (beta = 1) instead of a second pass.
    for (std::int64_t r = 0; r < rows; ++r) std::memcpy(y + r * out, bias, sizeof(T) * out);
  }
  gemm<T>(false, true, rows, out, in, T(1), x, in, weight, in, bias != nullptr ? T(1) : T(0), y,
          out);
}

template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, T* dx, T* dweight, T* dbias,
                     std::int64_t rows, std::int64_t in, std::int64_t out, bool dx_accumulate) {
  if (dx != nullptr) {
    gemm<T>(false, false, rows, in, out, T(1), dy, out, weight, in, dx_accumulate ? T(1) : T(0), dx,
            in);
  }
  gemm<T>(true, false, out, in, rows, T(1), dy, out, x, in, T(1), dweight, in);
  if (dbias != nullptr) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * out;
      for (std::int64_t j = 0; j < out; ++j) dbias[j] += row[j];
    }
  }
}

// oneDNN runs its GEMMs on OpenMP: the count applies to GEMMs the calling thread issues (an
// OpenMP thread-local setting), which is the compute thread that constructs the backend.
void set_num_threads(int threads) {
  if (threads < 1) fail("kernel thread count must be >= 1, got {}", threads);
  omp_set_num_threads(threads);
}

int num_threads() { return omp_get_max_threads(); }

#define ODC_INSTANTIATE(T)                                                                      \
  template void gemm<T>(bool, bool, std::int64_t, std::int64_t, std::int64_t, T, const T*,      \
                        std::int64_t, const T*, std::int64_t, T, T*, std::int64_t);             \
  template void linear_forward<T>(const T*, const T*, const T*, T*, std::int64_t, std::int64_t, \
                                  std::int64_t);                                                \
  template void linear_backward<T>(const T*, const T*, const T*, T*, T*, T*, std::int64_t,      \
                                   std::int64_t, std::int64_t, bool);
ODC_INSTANTIATE(float)
ODC_INSTANTIATE(double)
#undef ODC_INSTANTIATE

}  // namespace odc::kernels::cpu
