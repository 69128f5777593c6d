#include "odc/kernels/rmsnorm.h"

#include "odc/kernels/adamw.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include "parallel.h"
#include "vec_rows.h"

namespace odc::kernels::cpu {
namespace {

// Row reductions accumulate in double (sum_of_squares from adamw.h is the same reduction).

// sum_i a[i] * b[i] * c[i]
// Float: the 8-lane row kernel (vec_rows.h); double: four partial sums.
template <typename T>
double triple_dot_row(const T* a, const T* b, const T* c, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    return rows::triple_dot(a, b, c, n);
  } else {
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    std::int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
      s0 += double(a[i] * b[i]) * double(c[i]);
      s1 += double(a[i + 1] * b[i + 1]) * double(c[i + 1]);
      s2 += double(a[i + 2] * b[i + 2]) * double(c[i + 2]);
      s3 += double(a[i + 3] * b[i + 3]) * double(c[i + 3]);
    }
    for (; i < n; ++i) s0 += double(a[i] * b[i]) * double(c[i]);
    return (s0 + s1) + (s2 + s3);
  }
}

// Rows per piece of work for the compute threads. The backward's weight gradient is summed per
// piece, then the pieces in order: the same sums for any thread count.
constexpr std::int64_t kRowGrain = 32;

}  // namespace

template <typename T>
void rmsnorm_forward(const T* x, const T* weight, T* y, T* rstd, std::int64_t rows,
                     std::int64_t dim, double eps) {
  parallel_chunks(rows, kRowGrain, [&](std::int64_t row0, std::int64_t row1) {
    for (std::int64_t r = row0; r < row1; ++r) {
      const T* __restrict xr = x + r * dim;
      T* __restrict yr = y + r * dim;
      const double mean_square = sum_of_squares(xr, dim) / double(dim);
      const T inv = T(1.0 / std::sqrt(mean_square + eps));
      rstd[r] = inv;
#pragma omp simd
      for (std::int64_t i = 0; i < dim; ++i) yr[i] = xr[i] * inv * weight[i];
    }
  });
}

// With n = x * rstd (the normalized row) and y = n * w:
//   dx = rstd * (w*dy - x * rstd^2 * sum(w*dy*x) / dim),   dw += dy * n.
template <typename T>
void rmsnorm_backward(const T* dy, const T* x, const T* weight, const T* rstd, T* dx, T* dweight,
                      std::int64_t rows, std::int64_t dim, bool dx_accumulate) {
  if (rows <= 0) return;
  const std::int64_t pieces = (rows + kRowGrain - 1) / kRowGrain;
  // Piece 0 accumulates straight into dweight (a single piece is the serial loop); the others
  // into zeroed partial rows added afterwards in piece order.
  std::vector<T> partial(static_cast<std::size_t>((pieces - 1) * dim), T(0));
  parallel_chunks(rows, kRowGrain, [&](std::int64_t row0, std::int64_t row1) {
    const std::int64_t piece = row0 / kRowGrain;
    T* __restrict dw = piece == 0 ? dweight : partial.data() + (piece - 1) * dim;
    for (std::int64_t r = row0; r < row1; ++r) {
      const T* dyr = dy + r * dim;
      const T* xr = x + r * dim;
      T* dxr = dx + r * dim;
      const T inv = rstd[r];
      const double dot = triple_dot_row(dyr, weight, xr, dim);
      const T coef = T(double(inv) * double(inv) * double(inv) * dot / double(dim));
      if constexpr (std::is_same_v<T, float>) {
        rows::rmsnorm_backward_row(dyr, xr, weight, inv, coef, dxr, dw, dim, dx_accumulate);
      } else {
        // dy is read before dx is written at each index, so dx may alias dy.
        for (std::int64_t i = 0; i < dim; ++i) {
          const T g = dyr[i];
          dw[i] += g * (xr[i] * inv);
          const T grad = inv * weight[i] * g - coef * xr[i];
          dxr[i] = dx_accumulate ? dxr[i] + grad : grad;
        }
      }
    }
  });
  for (std::int64_t piece = 1; piece < pieces; ++piece) {
    const T* part = partial.data() + (piece - 1) * dim;
    for (std::int64_t i = 0; i < dim; ++i) dweight[i] += part[i];
  }
}

template void rmsnorm_forward<float>(const float*, const float*, float*, float*, std::int64_t,
                                     std::int64_t, double);
template void rmsnorm_forward<double>(const double*, const double*, double*, double*, std::int64_t,
                                      std::int64_t, double);
template void rmsnorm_backward<float>(const float*, const float*, const float*, const float*,
                                      float*, float*, std::int64_t, std::int64_t, bool);
template void rmsnorm_backward<double>(const double*, const double*, const double*, const double*,
                                       double*, double*, std::int64_t, std::int64_t, bool);

}  // namespace odc::kernels::cpu
