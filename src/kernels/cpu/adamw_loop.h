#pragma once
// Private to the CPU kernels: AdamW's element-wise update, one body for adamw.cpp (double) and
// vec_rows.cpp (float, compiled there for the x86-64 baseline and for AVX2).
#include <cmath>
#include <cstdint>

namespace odc::kernels::cpu {

// The per-step scalars, formed in double by adamw_step and applied in T.
template <typename T>
struct AdamWCoefficients {
  T decay, beta1, one_minus_beta1, beta2, one_minus_beta2, step_size, inv_sqrt_bc2, eps, grad_scale;
};

// g = grad * grad_scale, m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2,
// p = p decay - step_size m / (sqrt(v) inv_sqrt_bc2 + eps). The arrays do not overlap (restrict)
// and the loop is element-wise, so it vectorizes, sqrt and division included (IEEE-exact in every
// width: every compilation gives the same bits).
template <typename T>
[[gnu::always_inline]] inline void adamw_elements(T* __restrict p, const T* __restrict gr, T* __restrict m1,
                                                  T* __restrict m2, std::int64_t n, const AdamWCoefficients<T>& s) {
  const T decay = s.decay, beta1 = s.beta1, one_minus_beta1 = s.one_minus_beta1, beta2 = s.beta2,
          one_minus_beta2 = s.one_minus_beta2, step_size = s.step_size, inv_sqrt_bc2 = s.inv_sqrt_bc2, eps = s.eps,
          grad_scale = s.grad_scale;
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) {
    const T g = gr[i] * grad_scale;
    const T m = beta1 * m1[i] + one_minus_beta1 * g;
    const T v = beta2 * m2[i] + one_minus_beta2 * g * g;
    m1[i] = m;
    m2[i] = v;
    p[i] = p[i] * decay - step_size * m / (std::sqrt(v) * inv_sqrt_bc2 + eps);
  }
}

}  // namespace odc::kernels::cpu
