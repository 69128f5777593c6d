// AdamW: several steps against a naive double loop of torch.optim.AdamW's update (decoupled
// weight decay, bias correction, gradient scale), and the double-accumulated sum of squares.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "odc/kernels/adamw.h"
#include "unit/kernels/kernel_test_support.h"

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

TEST_CASE("adamw matches the torch update over several steps", "[kernels][adamw]") {
  const std::size_t n = 101;
  AdamWParams params;
  params.lr = 1e-2;
  params.beta1 = 0.9;
  params.beta2 = 0.95;
  params.eps = 1e-8;
  params.weight_decay = 0.1;
  params.grad_scale = 0.5;  // as if clipping halved the gradient

  auto p_ref = random_vector(n, 1);
  std::vector<double> m_ref(n, 0.0), v_ref(n, 0.0);
  auto p_d = p_ref;
  std::vector<double> m_d(n, 0.0), v_d(n, 0.0);
  auto p_f = convert<float>(p_ref);
  std::vector<float> m_f(n, 0.0f), v_f(n, 0.0f);

  for (int step = 1; step <= 5; ++step) {
    const auto grad = random_vector(n, 100 + step, -2.0, 2.0);
    // torch.optim.AdamW (single tensor), written out.
    for (std::size_t i = 0; i < n; ++i) {
      const double g = grad[i] * params.grad_scale;
      p_ref[i] *= 1 - params.lr * params.weight_decay;
      m_ref[i] = params.beta1 * m_ref[i] + (1 - params.beta1) * g;
      v_ref[i] = params.beta2 * v_ref[i] + (1 - params.beta2) * g * g;
      const double bc1 = 1 - std::pow(params.beta1, step);
      const double bc2 = 1 - std::pow(params.beta2, step);
      p_ref[i] -= params.lr / bc1 * m_ref[i] / (std::sqrt(v_ref[i]) / std::sqrt(bc2) + params.eps);
    }
    params.step = step;
    adamw_step<double>(p_d.data(), grad.data(), m_d.data(), v_d.data(), std::int64_t(n), params);
    const auto gf = convert<float>(grad);
    adamw_step<float>(p_f.data(), gf.data(), m_f.data(), v_f.data(), std::int64_t(n), params);
  }
  CHECK(max_abs_diff(p_d, p_ref) < 1e-15);
  CHECK(max_abs_diff(m_d, m_ref) < 1e-15);
  CHECK(max_abs_diff(v_d, v_ref) < 1e-15);
  // Float: each step moves a parameter by at most ~lr (1e-2); its float rounding, the update's
  // few roundings and the rounded inputs stay below 1e-6 absolute on parameters of size <= 1.
  CHECK(max_abs_diff(p_f, p_ref) < 1e-6);
  CHECK(relative_error(m_f, m_ref) < 1e-6);
  CHECK(relative_error(v_f, v_ref) < 1e-6);
}

TEST_CASE("adamw's first step moves each parameter by about lr", "[kernels][adamw]") {
  // With bias correction, step 1 gives m_hat = g, v_hat = g^2: the update is lr * sign(g).
  std::vector<double> p = {1.0, -2.0, 0.5}, g = {3.0, -0.25, 1e-3}, m(3, 0.0), v(3, 0.0);
  AdamWParams params;
  params.lr = 0.1;
  params.eps = 0.0;
  adamw_step<double>(p.data(), g.data(), m.data(), v.data(), 3, params);
  CHECK(p[0] == Approx(0.9).epsilon(1e-14));
  CHECK(p[1] == Approx(-1.9).epsilon(1e-14));
  CHECK(p[2] == Approx(0.4).epsilon(1e-14));
}

TEST_CASE("sum_of_squares accumulates in double", "[kernels][adamw]") {
  // 1e6 copies of 1e-6: a float running sum would stall once the total dwarfs the terms (error
  // ~1e-2); double summation errs by at most n * 1.1e-16 ~ 1e-10 relative.
  const std::vector<float> x(1000003, 1e-3f);
  const double expected = 1000003.0 * double(1e-3f) * double(1e-3f);
  CHECK(sum_of_squares(x.data(), std::int64_t(x.size())) == Approx(expected).epsilon(1e-10));
  const std::vector<double> y = {3.0, 4.0, 12.0};
  CHECK(sum_of_squares(y.data(), 3) == 169.0);
}
