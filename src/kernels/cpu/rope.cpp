#include "odc/kernels/rope.h"

#include <cmath>
#include <numbers>

#include "odc/core/error.h"
#include "parallel.h"

namespace odc::kernels::cpu {

template <typename T>
void rope_tables(const std::int32_t* positions, std::int64_t tokens,
                 const std::vector<double>& inv_freq, T* cos_table, T* sin_table) {
  const std::int64_t half = static_cast<std::int64_t>(inv_freq.size());
  for (std::int64_t t = 0; t < tokens; ++t) {
    const double p = double(positions[t]);
    for (std::int64_t i = 0; i < half; ++i) {
      const double angle = p * inv_freq[i];
      cos_table[t * half + i] = T(std::cos(angle));
      sin_table[t * half + i] = T(std::sin(angle));
    }
  }
}

namespace {

// Rotates every head of every token by +angle (sign = 1) or -angle (sign = -1, the transpose).
template <typename T>
void rotate(T* x, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
            int head_dim, T sign) {
  const std::int64_t half = head_dim / 2;
  parallel_chunks(tokens, 64, [&](std::int64_t t0, std::int64_t t1) {
  for (std::int64_t t = t0; t < t1; ++t) {
    const T* c = cos_table + t * half;
    const T* s = sin_table + t * half;
    for (int h = 0; h < heads; ++h) {
      T* lo = x + (t * heads + h) * head_dim;
      T* hi = lo + half;
      for (std::int64_t i = 0; i < half; ++i) {
        const T a = lo[i];
        const T b = hi[i];
        const T si = sign * s[i];
        lo[i] = a * c[i] - b * si;
        hi[i] = b * c[i] + a * si;
      }
    }
  }
  });
}

}  // namespace

template <typename T>
void rope_forward(T* x, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                  int head_dim) {
  rotate(x, cos_table, sin_table, tokens, heads, head_dim, T(1));
}

template <typename T>
void rope_backward(T* dx, const T* cos_table, const T* sin_table, std::int64_t tokens, int heads,
                   int head_dim) {
  rotate(dx, cos_table, sin_table, tokens, heads, head_dim, T(-1));
}

#define ODC_INSTANTIATE(T)                                                                        \
  template void rope_tables<T>(const std::int32_t*, std::int64_t, const std::vector<double>&, T*, \
                               T*);                                                               \
  template void rope_forward<T>(T*, const T*, const T*, std::int64_t, int, int);                  \
  template void rope_backward<T>(T*, const T*, const T*, std::int64_t, int, int);
ODC_INSTANTIATE(float)
ODC_INSTANTIATE(double)
#undef ODC_INSTANTIATE

}  // namespace odc::kernels::cpu
