// The row kernels exist as a baseline (SSE2) and an x86-64-v3 (AVX2) compilation; a run picks one
// from the CPU. Both must give bitwise the same results, so a model trains to the same numbers on
// any x86-64 CPU, and both must agree with float64 to the stated accuracy (the exp polynomial:
// about 1 ulp; sums of n terms: n ulp).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "../../../src/kernels/cpu/vec_rows.h"
#include "kernel_test_support.h"

namespace odc::kernels::cpu::rows {
namespace {

using test::random_vector;

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

bool have_v3() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

TEST_CASE("row kernels: the AVX2 variant gives the baseline's bits, and both match float64", "[kernels][vec_rows]") {
  if (!have_v3()) {
    WARN("this CPU has no AVX2+FMA: only the baseline variant runs (checked against float64)");
  }
  CHECK(active_isa() == (have_v3() ? Isa::x86_64_v3 : Isa::baseline));
  const std::vector<Isa> variants = have_v3() ? std::vector<Isa>{Isa::baseline, Isa::x86_64_v3} : std::vector<Isa>{Isa::baseline};
  // Lengths around the 8 lanes and a long row; values span exp's range down to the flush to 0.
  for (const std::int64_t n : {1, 7, 8, 9, 31, 1000}) {
    const auto x = random_vector<float>(n, 100 + std::uint32_t(n), -90, 80);
    const auto p = random_vector<float>(n, 200 + std::uint32_t(n), 0, 1);
    const auto u = random_vector<float>(n, 300 + std::uint32_t(n), -3, 3);
    std::vector<std::vector<float>> results;
    for (const Isa isa : variants) {
      std::vector<float> out;
      out.push_back(max_of(x.data(), n, isa));
      std::vector<float> e = x;
      out.push_back(exp_shifted_sum(e.data(), n, 3.0f, isa));
      out.insert(out.end(), e.begin(), e.end());
      std::vector<float> e2 = x;
      exp_shifted(e2.data(), n, 3.0f, isa);
      CHECK(same_bits(e, e2));  // the sum's exp and the plain exp are the same function
      std::vector<float> ds = u;
      softmax_grad(p.data(), ds.data(), n, 0.25f, isa);
      out.insert(out.end(), ds.begin(), ds.end());
      std::vector<float> h(n), dg(n), du(n);
      const auto g = random_vector<float>(n, 400 + std::uint32_t(n), -20, 20);
      swiglu_forward(g.data(), u.data(), h.data(), n, isa);
      swiglu_backward(p.data(), g.data(), u.data(), dg.data(), du.data(), n, isa);
      for (const auto* part : {&h, &dg, &du}) out.insert(out.end(), part->begin(), part->end());
      results.push_back(out);

      // Against float64.
      double ref_max = x[0], ref_sum = 0, worst_exp = 0, worst_silu = 0;
      for (std::int64_t i = 0; i < n; ++i) ref_max = std::max(ref_max, double(x[i]));
      CHECK(out[0] == float(ref_max));
      for (std::int64_t i = 0; i < n; ++i) {
        // The kernel's argument is the float x - shift; exp itself is the part under test.
        const double ref = std::exp(double(x[i] - 3.0f));
        ref_sum += ref;
        // Below ln(FLT_MIN) the kernel flushes to 0 (documented in vec_math.h).
        if (double(x[i]) - 3.0 > -87.0) worst_exp = std::max(worst_exp, std::fabs(e[i] - ref) / ref);
        const double gd = g[i], s = 1.0 / (1.0 + std::exp(-gd));
        const double ref_h = gd * s * u[i];
        worst_silu = std::max(worst_silu, std::fabs(h[i] - ref_h) / std::max(1e-30, std::fabs(ref_h)));
      }
      CHECK(worst_exp < 4e-7);
      CHECK(worst_silu < 2e-6);
      CHECK(std::fabs(out[1] - ref_sum) <= 1e-6 * double(n) * ref_sum);
    }
    if (results.size() == 2) CHECK(same_bits(results[0], results[1]));
  }
}

TEST_CASE("AdamW update, sums of squares and products, RMSNorm's row backward: the AVX2 variant gives the baseline's bits, float64 agrees",
          "[kernels][vec_rows]") {
  const std::vector<Isa> variants = have_v3() ? std::vector<Isa>{Isa::baseline, Isa::x86_64_v3} : std::vector<Isa>{Isa::baseline};
  const AdamWScalars s{0.999f, 0.9f, 0.1f, 0.95f, 0.05f, 1e-3f, 1.2f, 1e-8f, 0.5f};
  for (const std::int64_t n : {1, 7, 8, 9, 31, 1000}) {
    const auto grad = random_vector<float>(n, 500 + std::uint32_t(n), -2, 2);
    const auto p0 = random_vector<float>(n, 600 + std::uint32_t(n), -1, 1);
    const auto m0 = random_vector<float>(n, 700 + std::uint32_t(n), -0.1, 0.1);
    const auto v0 = random_vector<float>(n, 800 + std::uint32_t(n), 0, 0.01);
    std::vector<std::vector<float>> results;
    std::vector<double> sums;
    for (const Isa isa : variants) {
      std::vector<float> p = p0, m = m0, v = v0;
      adamw_update(p.data(), grad.data(), m.data(), v.data(), n, s, isa);
      std::vector<float> out = p;
      out.insert(out.end(), m.begin(), m.end());
      out.insert(out.end(), v.begin(), v.end());
      sums.push_back(sum_of_squares(grad.data(), n, isa));
      sums.push_back(triple_dot(grad.data(), p0.data(), m0.data(), n, isa));
      // RMSNorm's row backward, accumulating and not, with dx aliasing dy in the second call.
      std::vector<float> dw = v0, dx = m0, dy = grad;
      rmsnorm_backward_row(grad.data(), p0.data(), v0.data(), 1.5f, 0.25f, dx.data(), dw.data(), n, true, isa);
      rmsnorm_backward_row(dy.data(), p0.data(), v0.data(), 1.5f, 0.25f, dy.data(), dw.data(), n, false, isa);
      for (std::int64_t i = 0; i < n; ++i) {
        // The same float operations in the same order as the scalar loop of rmsnorm.cpp.
        float ref_dw = v0[i];
        ref_dw += grad[i] * (p0[i] * 1.5f);
        const float grad_x = 1.5f * v0[i] * grad[i] - 0.25f * p0[i];
        ref_dw += grad[i] * (p0[i] * 1.5f);
        CHECK(dx[i] == m0[i] + grad_x);
        CHECK(dy[i] == grad_x);
        CHECK(dw[i] == ref_dw);
      }
      for (const auto* part : {&dw, &dx, &dy}) out.insert(out.end(), part->begin(), part->end());
      // Float64 of the same formula: each element goes through ~12 float operations, each within
      // half an ulp, so 1e-5 relative (tens of ulps) bounds the float result with margin.
      double worst = 0, ref_sum = 0;
      for (std::int64_t i = 0; i < n; ++i) {
        const double g = double(grad[i]) * s.grad_scale;
        const double mm = double(s.beta1) * m0[i] + double(s.one_minus_beta1) * g;
        const double vv = double(s.beta2) * v0[i] + double(s.one_minus_beta2) * g * g;
        const double pp = double(p0[i]) * s.decay - double(s.step_size) * mm / (std::sqrt(vv) * s.inv_sqrt_bc2 + s.eps);
        worst = std::max(worst, std::fabs(p[i] - pp) / std::max(1e-6, std::fabs(pp)));
        ref_sum += double(grad[i]) * double(grad[i]);
      }
      CHECK(worst < 1e-5);
      results.push_back(out);
      // Squares of floats are exact in double; n additions in double: n ulps of 2^-52.
      CHECK(std::fabs(sums[sums.size() - 2] - ref_sum) <= 1e-15 * double(n) * ref_sum);
    }
    if (results.size() == 2) {
      CHECK(same_bits(results[0], results[1]));
      CHECK(sums[0] == sums[2]);
      CHECK(sums[1] == sums[3]);
    }
  }
}

}  // namespace
}  // namespace odc::kernels::cpu::rows
