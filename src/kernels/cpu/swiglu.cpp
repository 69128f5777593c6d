#include "odc/kernels/swiglu.h"

#include <cmath>
#include <type_traits>

#include "parallel.h"
#include "vec_rows.h"

namespace odc::kernels::cpu {
namespace {

// The float paths are vec_rows.h's 8-lane row kernels; double (tests, finite differences) is
// scalar here.
inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// d silu(g) / dg = s + g*s*(1-s) = s * (1 + g*(1-s)),  s = sigmoid(g).
inline void swiglu_grad(double dh, double g, double u, double& dgate, double& dup) {
  const double s = sigmoid(g);
  dup = dh * g * s;
  dgate = dh * u * s * (1.0 + g * (1.0 - s));
}

// Elements per piece of work for the compute threads (a multiple of the 8 SIMD lanes).
constexpr std::int64_t kGrain = 16384;

template <typename T>
void swiglu_forward_range(const T* gate, const T* up, T* h, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    rows::swiglu_forward(gate, up, h, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) h[i] = gate[i] * T(sigmoid(double(gate[i]))) * up[i];
  }
}

template <typename T>
void swiglu_backward_range(const T* dh, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    rows::swiglu_backward(dh, gate, up, dgate, dup, n);
  } else {
    for (std::int64_t i = 0; i < n; ++i) {
      double dg = 0, du = 0;
      swiglu_grad(double(dh[i]), double(gate[i]), double(up[i]), dg, du);
      dgate[i] = T(dg);
      dup[i] = T(du);
    }
  }
}

}  // namespace

template <typename T>
void swiglu_forward(const T* gate, const T* up, T* h, std::int64_t n) {
  parallel_chunks(n, kGrain, [&](std::int64_t b, std::int64_t e) { swiglu_forward_range(gate + b, up + b, h + b, e - b); });
}

template <typename T>
void swiglu_backward(const T* dh, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n) {
  parallel_chunks(n, kGrain, [&](std::int64_t b, std::int64_t e) {
    swiglu_backward_range(dh + b, gate + b, up + b, dgate + b, dup + b, e - b);
  });
}

template void swiglu_forward<float>(const float*, const float*, float*, std::int64_t);
template void swiglu_forward<double>(const double*, const double*, double*, std::int64_t);
template void swiglu_backward<float>(const float*, const float*, const float*, float*, float*,
                                     std::int64_t);
template void swiglu_backward<double>(const double*, const double*, const double*, double*, double*,
                                      std::int64_t);

}  // namespace odc::kernels::cpu
