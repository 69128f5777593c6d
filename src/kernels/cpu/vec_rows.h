#pragma once
// Private row kernels of the CPU kernels: the exp-heavy inner loops of attention and SwiGLU, on
// 8-lane float vectors. Each exists twice, compiled for the x86-64 baseline (SSE2) and for
// x86-64-v3 (AVX2 + FMA units, though -ffp-contract=off keeps every multiply and add separate);
// the variant is chosen once from the CPU's features. Both compute the same operations in the
// same order, so their results are bitwise equal (tests/unit/kernels/test_vec_rows.cpp), and a
// run gives the same numbers on any x86-64 CPU with or without AVX2.
#include <cstdint>

#include "adamw_loop.h"

namespace odc::kernels::cpu::rows {

enum class Isa { baseline, x86_64_v3 };

// The variant this CPU runs (x86_64_v3 where the CPU has AVX2 and FMA).
Isa active_isa();

// Largest element of x[0..n), n >= 1.
float max_of(const float* x, std::int64_t n, Isa isa = active_isa());
// x[i] = exp(x[i] - shift) for i < n; returns the sum of the new values.
float exp_shifted_sum(float* x, std::int64_t n, float shift, Isa isa = active_isa());
// x[i] = exp(x[i] - shift) for i < n.
void exp_shifted(float* x, std::int64_t n, float shift, Isa isa = active_isa());
// ds[i] = p[i] * (ds[i] - shift) for i < n (the softmax backward of one row).
void softmax_grad(const float* p, float* ds, std::int64_t n, float shift, Isa isa = active_isa());
// h = silu(gate) * up.
void swiglu_forward(const float* gate, const float* up, float* h, std::int64_t n, Isa isa = active_isa());
// dgate, dup of swiglu_forward given dh.
void swiglu_backward(const float* dh, const float* gate, const float* up, float* dgate, float* dup, std::int64_t n,
                     Isa isa = active_isa());

// One AdamW update of n elements (adamw_loop.h); the four arrays must not overlap.
using AdamWScalars = AdamWCoefficients<float>;
void adamw_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, std::int64_t n,
                  const AdamWScalars& s, Isa isa = active_isa());
// Sum of x[i]^2 in double: eight lanes of partial sums (the squares of floats are exact in
// double), summed in a fixed order at the end.
double sum_of_squares(const float* x, std::int64_t n, Isa isa = active_isa());

// sum_i double(a[i] * b[i]) * double(c[i]) (the float product, then double), in eight lanes.
double triple_dot(const float* a, const float* b, const float* c, std::int64_t n, Isa isa = active_isa());
// One row of RMSNorm's backward: dw[i] += dy[i] * (x[i] * inv);
// dx[i] (+)= inv * w[i] * dy[i] - coef * x[i]. dx may be dy (each 8-lane block of dy is read
// before dx's is written); dw overlaps nothing.
void rmsnorm_backward_row(const float* dy, const float* x, const float* w, float inv, float coef, float* dx, float* dw,
                          std::int64_t n, bool accumulate, Isa isa = active_isa());

}  // namespace odc::kernels::cpu::rows

// The float overloads next to vec_math.h's double ones, so kernels templated on T call one name.
namespace odc::kernels::cpu::vec {
inline float max_of(const float* x, std::int64_t n) { return rows::max_of(x, n); }
inline float exp_shifted_sum(float* x, std::int64_t n, float shift) { return rows::exp_shifted_sum(x, n, shift); }
inline void exp_shifted(float* x, std::int64_t n, float shift) { rows::exp_shifted(x, n, shift); }
inline void softmax_grad(const float* p, float* ds, std::int64_t n, float shift) { rows::softmax_grad(p, ds, n, shift); }
}  // namespace odc::kernels::cpu::vec
