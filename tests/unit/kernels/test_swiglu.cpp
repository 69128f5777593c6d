// SwiGLU: float forward against a naive double loop over a wide input range, backward against
// central finite differences in double.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "odc/kernels/swiglu.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

double silu(double g) { return g / (1.0 + std::exp(-g)); }

}  // namespace

TEST_CASE("swiglu forward matches silu(gate) * up", "[kernels][swiglu]") {
  // 1003 elements: not a multiple of the 4-lane vector width, so the tail path runs too.
  const std::size_t n = 1003;
  auto gate = random_vector(n, 1, -12.0, 12.0);
  // Saturated and extreme gates: exp must neither overflow nor produce NaN.
  gate[0] = -100.0;
  gate[1] = 100.0;
  gate[2] = 0.0;
  gate[n - 1] = -90.0;
  const auto up = random_vector(n, 2, -2.0, 2.0);
  std::vector<double> ref(n);
  for (std::size_t i = 0; i < n; ++i) ref[i] = silu(gate[i]) * up[i];

  const auto gf = convert<float>(gate), uf = convert<float>(up);
  std::vector<float> hf(n);
  swiglu_forward<float>(gf.data(), uf.data(), hf.data(), std::int64_t(n));
  // Per element: exp within 2 ulp, then a division and two products: below 1e-6 relative, with
  // an absolute floor of 1e-30 where silu underflows (gate = -100: silu ~ -4e-42).
  for (std::size_t i = 0; i < n; ++i) {
    CAPTURE(i, gate[i]);
    CHECK(std::fabs(hf[i] - ref[i]) <= 1e-6 * std::fabs(ref[i]) + 1e-30);
  }
  std::vector<double> hd(n);
  swiglu_forward<double>(gate.data(), up.data(), hd.data(), std::int64_t(n));
  CHECK(relative_error(hd, ref) < 1e-15);

  // A NaN gate must surface as NaN (a diverged run has to show up in the loss), in the vector
  // body and in the tail.
  std::vector<float> nan_gate(6, 1.0f), nan_up(6, 1.0f), nan_h(6);
  nan_gate[1] = std::nanf("");
  nan_gate[5] = std::nanf("");
  swiglu_forward<float>(nan_gate.data(), nan_up.data(), nan_h.data(), 6);
  CHECK(std::isnan(nan_h[1]));
  CHECK(std::isnan(nan_h[5]));
  CHECK(nan_h[0] == Approx(silu(1.0)).epsilon(1e-6));
}

TEST_CASE("swiglu backward matches central finite differences in double", "[kernels][swiglu]") {
  const std::size_t n = 37;
  auto gate = random_vector(n, 3, -6.0, 6.0);
  auto up = random_vector(n, 4, -2.0, 2.0);
  const auto dh = random_vector(n, 5);  // loss = sum(h * dh)
  auto loss = [&] {
    std::vector<double> h(n);
    swiglu_forward<double>(gate.data(), up.data(), h.data(), std::int64_t(n));
    return dot(h, dh);
  };
  std::vector<double> dgate(n), dup(n);
  swiglu_backward<double>(dh.data(), gate.data(), up.data(), dgate.data(), dup.data(),
                          std::int64_t(n));
  CHECK(gradient_error(dgate, gate, loss) < 1e-6);
  CHECK(gradient_error(dup, up, loss) < 1e-6);

  SECTION("the float backward agrees with the double backward, tail included") {
    const auto gf = convert<float>(gate), uf = convert<float>(up), df = convert<float>(dh);
    std::vector<float> dgf(n), duf(n);
    swiglu_backward<float>(df.data(), gf.data(), uf.data(), dgf.data(), duf.data(),
                           std::int64_t(n));
    // A few float roundings per element (exp, division, four products).
    CHECK(relative_error(dgf, dgate) < 1e-6);
    CHECK(relative_error(duf, dup) < 1e-6);
  }
}
