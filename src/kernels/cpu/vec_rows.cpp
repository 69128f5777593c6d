#include "vec_rows.h"

#include <cstring>

#include "vec_math.h"

namespace odc::kernels::cpu::rows {
namespace {

using V = vec::f32x8;
constexpr std::int64_t kLanes = 8;

[[gnu::always_inline]] inline V load(const float* p) {
  V v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
[[gnu::always_inline]] inline void store(float* p, V v) { std::memcpy(p, &v, sizeof v); }

// A row's tail (n % 8 elements) goes through the same 8-lane code on a zero-padded copy, so every
// element gets the vector body's arithmetic whatever its position.
[[gnu::always_inline]] inline V load_tail(const float* p, std::int64_t count) {
  float padded[kLanes] = {};
  std::memcpy(padded, p, sizeof(float) * static_cast<std::size_t>(count));
  return load(padded);
}
[[gnu::always_inline]] inline void store_tail(float* p, V v, std::int64_t count) {
  float out[kLanes];
  store(out, v);
  std::memcpy(p, out, sizeof(float) * static_cast<std::size_t>(count));
}

[[gnu::always_inline]] inline float max_body(const float* x, std::int64_t n) {
  V m = V{} + x[0];
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V v = load(x + i);
    m = v > m ? v : m;
  }
  float result = m[0];
  for (int lane = 1; lane < kLanes; ++lane) result = m[lane] > result ? m[lane] : result;
  for (; i < n; ++i) result = x[i] > result ? x[i] : result;
  return result;
}

[[gnu::always_inline]] inline float exp_shifted_sum_body(float* x, std::int64_t n, float shift) {
  V acc{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V e = vec::exp<V>(load(x + i) - shift);
    store(x + i, e);
    acc += e;
  }
  if (i < n) {
    // Padding lanes would add exp(0 - shift): mask them to zero.
    const std::int64_t count = n - i;
    V e = vec::exp<V>(load_tail(x + i, count) - shift);
    store_tail(x + i, e, count);
    for (std::int64_t lane = count; lane < kLanes; ++lane) e[lane] = 0.0f;
    acc += e;
  }
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

[[gnu::always_inline]] inline void exp_shifted_body(float* x, std::int64_t n, float shift) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(x + i, vec::exp<V>(load(x + i) - shift));
  if (i < n) store_tail(x + i, vec::exp<V>(load_tail(x + i, n - i) - shift), n - i);
}

[[gnu::always_inline]] inline void softmax_grad_body(const float* p, float* ds, std::int64_t n, float shift) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) store(ds + i, load(p + i) * (load(ds + i) - shift));
  for (; i < n; ++i) ds[i] = p[i] * (ds[i] - shift);
}

// sigmoid(g) = 1 / (1 + exp(-g)); exp saturates instead of overflowing, so very negative g gives a
// tiny positive sigmoid rather than 1/inf.
[[gnu::always_inline]] inline V sigmoid(V g) { return 1.0f / (1.0f + vec::exp<V>(-g)); }

[[gnu::always_inline]] inline void swiglu_forward_body(const float* gate, const float* up, float* h, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const V g = load(gate + i);
    store(h + i, g * sigmoid(g) * load(up + i));
  }
  if (i < n) {
    const V g = load_tail(gate + i, n - i);
    store_tail(h + i, g * sigmoid(g) * load_tail(up + i, n - i), n - i);
  }
}

// d silu(g) / dg = s + g*s*(1-s) = s * (1 + g*(1-s)),  s = sigmoid(g).
[[gnu::always_inline]] inline void swiglu_grad(V dh, V g, V u, V& dgate, V& dup) {
  const V s = sigmoid(g);
  dup = dh * g * s;
  dgate = dh * u * s * (1.0f + g * (1.0f - s));
}

[[gnu::always_inline]] inline void swiglu_backward_body(const float* dh, const float* gate, const float* up,
                                                        float* dgate, float* dup, std::int64_t n) {
  std::int64_t i = 0;
  V dg, du;
  for (; i + kLanes <= n; i += kLanes) {
    swiglu_grad(load(dh + i), load(gate + i), load(up + i), dg, du);
    store(dgate + i, dg);
    store(dup + i, du);
  }
  if (i < n) {
    const std::int64_t count = n - i;
    swiglu_grad(load_tail(dh + i, count), load_tail(gate + i, count), load_tail(up + i, count), dg, du);
    store_tail(dgate + i, dg, count);
    store_tail(dup + i, du, count);
  }
}

// The two compilations of every body: the baseline and x86-64-v3.
#define ODC_ROW_VARIANTS(suffix, attributes)                                                            \
  attributes float max_##suffix(const float* x, std::int64_t n) { return max_body(x, n); }               \
  attributes float exp_shifted_sum_##suffix(float* x, std::int64_t n, float s) {                         \
    return exp_shifted_sum_body(x, n, s);                                                                \
  }                                                                                                      \
  attributes void exp_shifted_##suffix(float* x, std::int64_t n, float s) { exp_shifted_body(x, n, s); } \
  attributes void softmax_grad_##suffix(const float* p, float* ds, std::int64_t n, float s) {            \
    softmax_grad_body(p, ds, n, s);                                                                      \
  }                                                                                                      \
  attributes void swiglu_forward_##suffix(const float* g, const float* u, float* h, std::int64_t n) {    \
    swiglu_forward_body(g, u, h, n);                                                                     \
  }                                                                                                      \
  attributes void swiglu_backward_##suffix(const float* dh, const float* g, const float* u, float* dg,   \
                                           float* du, std::int64_t n) {                                  \
    swiglu_backward_body(dh, g, u, dg, du, n);                                                           \
  }

ODC_ROW_VARIANTS(baseline, )
#if defined(__x86_64__)
ODC_ROW_VARIANTS(v3, __attribute__((target("arch=x86-64-v3"))))
#define ODC_PICK(name, ...) (isa == Isa::x86_64_v3 ? name##_v3(__VA_ARGS__) : name##_baseline(__VA_ARGS__))
#else
#define ODC_PICK(name, ...) name##_baseline(__VA_ARGS__)
#endif
#undef ODC_ROW_VARIANTS

}  // namespace

Isa active_isa() {
#if defined(__x86_64__)
  static const Isa isa = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? Isa::x86_64_v3 : Isa::baseline;
  return isa;
#else
  return Isa::baseline;
#endif
}

float max_of(const float* x, std::int64_t n, Isa isa) { return ODC_PICK(max, x, n); }
float exp_shifted_sum(float* x, std::int64_t n, float shift, Isa isa) { return ODC_PICK(exp_shifted_sum, x, n, shift); }
void exp_shifted(float* x, std::int64_t n, float shift, Isa isa) { ODC_PICK(exp_shifted, x, n, shift); }
void softmax_grad(const float* p, float* ds, std::int64_t n, float shift, Isa isa) {
  ODC_PICK(softmax_grad, p, ds, n, shift);
}
void swiglu_forward(const float* gate, const float* up, float* h, std::int64_t n, Isa isa) {
  ODC_PICK(swiglu_forward, gate, up, h, n);
}
void swiglu_backward(const float* dh, const float* gate, const float* up, float* dgate, float* dup, std::int64_t n,
                     Isa isa) {
  ODC_PICK(swiglu_backward, dh, gate, up, dgate, dup, n);
}
#undef ODC_PICK

}  // namespace odc::kernels::cpu::rows
