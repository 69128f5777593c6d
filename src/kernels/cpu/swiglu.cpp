#include "odc/kernels/swiglu.h"

#include <cmath>
#include <type_traits>

#include "parallel.h"
#include "vec_math.h"

namespace odc::kernels::cpu {
namespace {

using vec::f32x4;

// sigmoid(g) = 1 / (1 + exp(-g)); exp saturates instead of overflowing, so very negative g gives
// a tiny positive sigmoid rather than 1/inf.
inline f32x4 sigmoid(f32x4 g) { return 1.0f / (1.0f + vec::exp(-g)); }
inline double sigmoid(double g) { return 1.0 / (1.0 + std::exp(-g)); }

// d silu(g) / dg = s + g*s*(1-s) = s * (1 + g*(1-s)),  s = sigmoid(g).
template <typename V>
inline void swiglu_grad(V dh, V g, V u, V& dgate, V& dup) {
  const V s = sigmoid(g);
  dup = dh * g * s;
  dgate = dh * u * s * (1.0f + g * (1.0f - s));
}

// Elements per piece of work for the compute threads (a multiple of the 4 SIMD lanes).
constexpr std::int64_t kGrain = 16384;

template <typename T>
void swiglu_forward_range(const T* gate, const T* up, T* h, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    for (; i + vec::kLanes <= n; i += vec::kLanes) {
      const f32x4 g = vec::load(gate + i);
      vec::store(h + i, g * sigmoid(g) * vec::load(up + i));
    }
    // The tail goes through the same 4-lane code, so results do not depend on the position.
    if (i < n) {
      float g[4] = {}, u[4] = {}, out[4];
      for (std::int64_t j = i; j < n; ++j) g[j - i] = gate[j], u[j - i] = up[j];
      const f32x4 gv = vec::load(g);
      vec::store(out, gv * sigmoid(gv) * vec::load(u));
      for (std::int64_t j = i; j < n; ++j) h[j] = out[j - i];
    }
  } else {
    for (; i < n; ++i) h[i] = gate[i] * T(sigmoid(double(gate[i]))) * up[i];
  }
}

template <typename T>
void swiglu_backward_range(const T* dh, const T* gate, const T* up, T* dgate, T* dup, std::int64_t n) {
  std::int64_t i = 0;
  if constexpr (std::is_same_v<T, float>) {
    f32x4 dg, du;
    for (; i + vec::kLanes <= n; i += vec::kLanes) {
      swiglu_grad(vec::load(dh + i), vec::load(gate + i), vec::load(up + i), dg, du);
      vec::store(dgate + i, dg);
      vec::store(dup + i, du);
    }
    if (i < n) {
      float d[4] = {}, g[4] = {}, u[4] = {}, dgo[4], duo[4];
      for (std::int64_t j = i; j < n; ++j) d[j - i] = dh[j], g[j - i] = gate[j], u[j - i] = up[j];
      swiglu_grad(vec::load(d), vec::load(g), vec::load(u), dg, du);
      vec::store(dgo, dg);
      vec::store(duo, du);
      for (std::int64_t j = i; j < n; ++j) dgate[j] = dgo[j - i], dup[j] = duo[j - i];
    }
  } else {
    for (; i < n; ++i) {
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
