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

// Double partial sums in two 4-lane vectors (one ymm each on AVX2; a 64-byte vector made GCC
// spill to the stack): lanes 0-3 of every 8-element block into lo, 4-7 into hi.
using D4 = double __attribute__((vector_size(32)));
using F4 = vec::f32x4;

[[gnu::always_inline]] inline D4 widen(const float* p) { return __builtin_convertvector(vec::load(p), D4); }

[[gnu::always_inline]] inline double lanes_sum(D4 lo, D4 hi) {
  return ((lo[0] + lo[1]) + (lo[2] + lo[3])) + ((hi[0] + hi[1]) + (hi[2] + hi[3]));
}

[[gnu::always_inline]] inline double sum_of_squares_body(const float* x, std::int64_t n) {
  D4 lo{}, hi{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    const D4 a = widen(x + i), b = widen(x + i + 4);
    lo += a * a;
    hi += b * b;
  }
  if (i < n) {
    float padded[kLanes] = {};  // padding lanes add 0
    std::memcpy(padded, x + i, sizeof(float) * static_cast<std::size_t>(n - i));
    const D4 a = widen(padded), b = widen(padded + 4);
    lo += a * a;
    hi += b * b;
  }
  return lanes_sum(lo, hi);
}

[[gnu::always_inline]] inline void triple_dot_block(const float* a, const float* b, const float* c, D4& lo, D4& hi) {
  const F4 ab_lo = vec::load(a) * vec::load(b), ab_hi = vec::load(a + 4) * vec::load(b + 4);
  lo += __builtin_convertvector(ab_lo, D4) * widen(c);
  hi += __builtin_convertvector(ab_hi, D4) * widen(c + 4);
}

[[gnu::always_inline]] inline double triple_dot_body(const float* a, const float* b, const float* c, std::int64_t n) {
  D4 lo{}, hi{};
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) triple_dot_block(a + i, b + i, c + i, lo, hi);
  if (i < n) {
    const auto count = sizeof(float) * static_cast<std::size_t>(n - i);
    float pa[kLanes] = {}, pb[kLanes] = {}, pc[kLanes] = {};
    std::memcpy(pa, a + i, count);
    std::memcpy(pb, b + i, count);
    std::memcpy(pc, c + i, count);
    triple_dot_block(pa, pb, pc, lo, hi);
  }
  return lanes_sum(lo, hi);
}

[[gnu::always_inline]] inline void rmsnorm_grad(V dy, V x, V w, V dx_in, V& dw, V& dx, float inv, float coef,
                                                bool accumulate) {
  dw += dy * (x * inv);
  const V grad = inv * w * dy - coef * x;
  dx = accumulate ? dx_in + grad : grad;
}

[[gnu::always_inline]] inline void rmsnorm_backward_body(const float* dy, const float* x, const float* w, float inv,
                                                         float coef, float* dx, float* dw, std::int64_t n,
                                                         bool accumulate) {
  std::int64_t i = 0;
  V out;
  for (; i + kLanes <= n; i += kLanes) {
    V acc = load(dw + i);
    rmsnorm_grad(load(dy + i), load(x + i), load(w + i), accumulate ? load(dx + i) : V{}, acc, out, inv, coef,
                 accumulate);
    store(dw + i, acc);
    store(dx + i, out);
  }
  if (i < n) {
    const std::int64_t count = n - i;
    V acc = load_tail(dw + i, count);
    rmsnorm_grad(load_tail(dy + i, count), load_tail(x + i, count), load_tail(w + i, count), accumulate ? load_tail(dx + i, count) : V{}, acc,
                 out, inv, coef, accumulate);
    store_tail(dw + i, acc, count);
    store_tail(dx + i, out, count);
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
  }                                                                                                      \
  attributes void adamw_##suffix(float* p, const float* g, float* m1, float* m2, std::int64_t n,         \
                                 const AdamWScalars& s) {                                                \
    adamw_elements(p, g, m1, m2, n, s);                                                                  \
  }                                                                                                      \
  attributes double sum_of_squares_##suffix(const float* x, std::int64_t n) { return sum_of_squares_body(x, n); } \
  attributes double triple_dot_##suffix(const float* a, const float* b, const float* c, std::int64_t n) {           \
    return triple_dot_body(a, b, c, n);                                                                             \
  }                                                                                                                 \
  attributes void rmsnorm_backward_##suffix(const float* dy, const float* x, const float* w, float inv, float coef, \
                                            float* dx, float* dw, std::int64_t n, bool accumulate) {               \
    rmsnorm_backward_body(dy, x, w, inv, coef, dx, dw, n, accumulate);                                            \
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
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                  const AdamWScalars& s, Isa isa) {
  ODC_PICK(adamw, param, grad, exp_avg, exp_avg_sq, n, s);
}
double sum_of_squares(const float* x, std::int64_t n, Isa isa) { return ODC_PICK(sum_of_squares, x, n); }
double triple_dot(const float* a, const float* b, const float* c, std::int64_t n, Isa isa) {
  return ODC_PICK(triple_dot, a, b, c, n);
}
void rmsnorm_backward_row(const float* dy, const float* x, const float* w, float inv, float coef, float* dx, float* dw,
                          std::int64_t n, bool accumulate, Isa isa) {
  ODC_PICK(rmsnorm_backward, dy, x, w, inv, coef, dx, dw, n, accumulate);
}
#undef ODC_PICK

}  // namespace odc::kernels::cpu::rows
