#pragma once
// Private helpers of the CPU kernels: explicit 4-lane float SIMD (GCC/Clang vector extensions)
// for the exp-heavy loops (softmax rows, SwiGLU, cross-entropy). The build is -O2 for a generic
// x86-64 target, where GCC's cheap vectorizer leaves loops with a runtime trip count or a
// floating-point select scalar; glibc's scalar expf measured ~3x slower than the 4-lane exp
// below, on a loop that is a large share of attention time. 16-byte vectors are the widest the
// baseline ABI has (SSE2/NEON), so there are no -Wpsabi issues. Double paths (tests and finite
// differences) stay scalar std::exp.
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

// exp(x) with Cephes' degree-6 polynomial after reduction by ln 2: measured relative error
// below 1e-7 (about 1 ulp) over the whole range. Inputs below ln(FLT_MIN) give exactly 0 (the true
// value is subnormal or underflows anyway); inputs above ~88.38 give ~2.4e38 instead of
// overflowing; NaN propagates.
inline f32x4 exp(f32x4 x) {
  const f32x4 lo = splat(-87.3365447505531f);
  const f32x4 hi = splat(88.3762626647949f);
  const f32x4 input = x;
  const i32x4 is_nan = x != x;
  const i32x4 underflow = x < lo;
  // NaN lanes compute on 0 and are restored at the end: converting NaN to int is undefined.
  x = is_nan ? splat(0.0f) : x;
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Round x/ln2 to nearest with the 1.5*2^23 trick (plain adds: no SSE4.1 round instruction).
  const f32x4 magic = splat(12582912.0f);
  const f32x4 n = (x * 1.44269504088896341f + magic) - magic;
  // r = x - n*ln2 in two parts; n*0.693359375 is exact (few mantissa bits), keeping r accurate.
  const f32x4 r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  f32x4 p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
  const i32x4 exponent = (__builtin_convertvector(n, i32x4) + 127) << 23;
  f32x4 scale;
  std::memcpy(&scale, &exponent, sizeof scale);
  const f32x4 result = underflow ? splat(0.0f) : p * scale;
  return is_nan ? input : result;
}

// The same polynomial for a single value, so that a loop's scalar tail gives bit-identical
// results to its vector body.
inline float exp(float x) { return exp(splat(x))[0]; }
inline double exp(double x) { return std::exp(x); }

// Largest element of x[0..n), n >= 1.
inline float max_of(const float* x, std::int64_t n) {
  f32x4 m = splat(x[0]);
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x4 v = load(x + i);
    m = v > m ? v : m;
  }
  float result = m[0];
  for (int lane = 1; lane < kLanes; ++lane) result = m[lane] > result ? m[lane] : result;
  for (; i < n; ++i) result = x[i] > result ? x[i] : result;
  return result;
}

inline double max_of(const double* x, std::int64_t n) {
  double result = x[0];
  for (std::int64_t i = 1; i < n; ++i) result = x[i] > result ? x[i] : result;
  return result;
}

// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new values.
inline float exp_shifted_sum(float* x, std::int64_t n, float shift) {
  f32x4 acc = splat(0.0f);
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const f32x4 e = exp(load(x + i) - shift);
    store(x + i, e);
    acc += e;
  }
  float sum = horizontal_sum(acc);
  for (; i < n; ++i) {
    x[i] = exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

inline double exp_shifted_sum(double* x, std::int64_t n, double shift) {
  double sum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - shift);
    sum += x[i];
  }
  return sum;
}

// x[i] = exp(x[i] - shift) for i < n.
inline void exp_shifted(float* x, std::int64_t n, float shift) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(x + i, exp(load(x + i) - shift));
  for (; i < n; ++i) x[i] = exp(x[i] - shift);
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

// ds[i] = p[i] * (ds[i] - shift) for i < n (the softmax backward of one row).
inline void softmax_grad(const float* p, float* ds, std::int64_t n, float shift) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(ds + i, load(p + i) * (load(ds + i) - shift));
  for (; i < n; ++i) ds[i] = p[i] * (ds[i] - shift);
}

inline void softmax_grad(const double* p, double* ds, std::int64_t n, double shift) {
  for (std::int64_t i = 0; i < n; ++i) ds[i] = p[i] * (ds[i] - shift);
}

}  // namespace odc::kernels::cpu::vec
