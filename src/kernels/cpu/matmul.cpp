#include "odc/kernels/matmul.h"

// cblas.h declares C99 _Complex types, which -Wpedantic flags in C++ under Clang.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#include <cblas.h>
#pragma GCC diagnostic pop

#include <algorithm>
#include <climits>
#include <cstring>
#include <type_traits>

#include "odc/core/error.h"

namespace odc::kernels::cpu {
namespace {

// The distribution's OpenBLAS is the LP64 build: every size and stride must fit in blasint.
blasint to_blas(std::int64_t value, const char* what) {
  ODC_CHECK(value >= 0 && value <= INT_MAX, "gemm {} = {} does not fit OpenBLAS's 32-bit int", what,
            value);
  return static_cast<blasint>(value);
}

}  // namespace

template <typename T>
void gemm(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n, std::int64_t k, T alpha,
          const T* a, std::int64_t lda, const T* b, std::int64_t ldb, T beta, T* c,
          std::int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // Nothing to multiply; BLAS would still reject the (unused) strides of A and B.
    for (std::int64_t i = 0; i < m; ++i) {
      T* row = c + i * ldc;
      if (beta == T(0)) {
        std::fill(row, row + n, T(0));
      } else {
        for (std::int64_t j = 0; j < n; ++j) row[j] *= beta;
      }
    }
    return;
  }
  const CBLAS_TRANSPOSE ta = trans_a ? CblasTrans : CblasNoTrans;
  const CBLAS_TRANSPOSE tb = trans_b ? CblasTrans : CblasNoTrans;
  const blasint bm = to_blas(m, "m"), bn = to_blas(n, "n"), bk = to_blas(k, "k");
  const blasint blda = to_blas(lda, "lda"), bldb = to_blas(ldb, "ldb"), bldc = to_blas(ldc, "ldc");
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, ta, tb, bm, bn, bk, alpha, a, blda, b, bldb, beta, c, bldc);
  } else {
    cblas_dgemm(CblasRowMajor, ta, tb, bm, bn, bk, alpha, a, blda, b, bldb, beta, c, bldc);
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

void set_num_threads(int threads) {
  if (threads < 1) fail("kernel thread count must be >= 1, got {}", threads);
  openblas_set_num_threads(threads);
}

int num_threads() { return openblas_get_num_threads(); }

GemmInfo gemm_info() { return {openblas_get_config(), "unknown", openblas_get_corename()}; }

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
