#pragma once
// Private helpers of the CPU kernels: explicit float SIMD (GCC/Clang vector extensions) for the
// exp-heavy loops (softmax rows, SwiGLU, cross-entropy). The build is -O2 for a generic x86-64
// target, where GCC's cheap vectorizer leaves loops with a runtime trip count or a floating-point
// select scalar; glibc's scalar expf measured ~3x slower than the vector exp below. The 4-lane
// type is the baseline ABI's widest (SSE2/NEON); the 8-lane one serves the row kernels of
// vec_rows.h, which also run as AVX2 variants where the CPU has them. Double paths (tests and
// finite differences) stay scalar std::exp.
#include <cmath>
#include <cstdint>
#include <cstring>

namespace odc::kernels::cpu::vec {

using f32x4 = float __attribute__((vector_size(16)));
using i32x4 = std::int32_t __attribute__((vector_size(16)));

inline constexpr std::int64_t kLanes = 4;

inline f32x4 load(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline void store(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }

inline f32x4 splat(float x) { return f32x4{x, x, x, x}; }

inline float horizontal_sum(f32x4 v) { return (v[0] + v[1]) + (v[2] + v[3]); }

// 8-lane float vectors for the row kernels of vec_rows.cpp: on the baseline target GCC lowers
// them to pairs of SSE operations, in an AVX2 build (those kernels' x86-64-v3 variants) to one
// ymm operation, with the same results lane by lane.
using f32x8 = float __attribute__((vector_size(32)));
using i32x8 = std::int32_t __attribute__((vector_size(32)));

template <typename V>
struct IntVector;
template <>
struct IntVector<f32x4> {
  using type = i32x4;
};
template <>
struct IntVector<f32x8> {
  using type = i32x8;
};

// exp(x) with Cephes' degree-6 polynomial after reduction by ln 2: measured relative error
// below 1e-7 (about 1 ulp) over the whole range. Inputs below ln(FLT_MIN) give exactly 0 (the true
// value is subnormal or underflows anyway); inputs above ~88.38 give ~2.4e38 instead of
// overflowing; NaN propagates. The CPU kernels build with -ffp-contract=off, so no variant fuses a
// multiply-add here: every lane count and instruction set gives the same bits.
template <typename V>
[[gnu::always_inline]] inline V exp(V x) {
  using I = typename IntVector<V>::type;
  const V lo = V{} + -87.3365447505531f;
  const V hi = V{} + 88.3762626647949f;
  const V input = x;
  const I is_nan = x != x;
  const I underflow = x < lo;
  // NaN lanes compute on 0 and are restored at the end: converting NaN to int is undefined.
  x = is_nan ? V{} : x;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Round x/ln2 to nearest with the 1.5*2^23 trick (plain adds: no SSE4.1 round instruction).
  const V n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // r = x - n*ln2 in two parts; n*0.693359375 is exact (few mantissa bits), keeping r accurate.
  const V r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  V p = V{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const I exponent = (__builtin_convertvector(n, I) + 127) << 23;
  V scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  const V result = underflow ? V{} : p * scale;
  return is_nan ? input : result;
}

// The same polynomial for a single value, so that a loop's scalar tail gives bit-identical
// results to its vector body.
inline float exp(float x) { return exp<f32x4>(splat(x))[0]; }
inline double exp(double x) { return std::exp(x); }

// Double versions of vec_rows.h (tests and finite differences): scalar.
inline double max_of(const double* x, std::int64_t n) {
  double result = x[0];
  for (std::int64_t i = 1; i < n; ++i) result = x[i] > result ? x[i] : result;
  return result;
}

inline double exp_shifted_sum(double* x, std::int64_t n, double shift) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline void exp_shifted(double* x, std::int64_t n, double shift) {
  for (std::int64_t i = 0; i < n; ++i) x[i] = std::exp(x[i] - shift);
}

// x[i] *= a for i < n.
inline void scale(float* x, std::int64_t n, float a) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(x + i, load(x + i) * a);
  for (; i < n; ++i) x[i] *= a;
}

inline void scale(double* x, std::int64_t n, double a) {
  for (std::int64_t i = 0; i < n; ++i) x[i] *= a;
}

inline void softmax_grad(const double* p, double* ds, std::int64_t n, double shift) {
  for (std::int64_t i = 0; i < n; ++i) ds[i] = p[i] * (ds[i] - shift);
}

}  // namespace odc::kernels::cpu::vec
