// RMSNorm: float forward against a naive double loop, backward against central finite
// differences in double, accumulate flags.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "odc/kernels/rmsnorm.h"
#include "unit/kernels/kernel_test_support.h"

namespace {

using namespace odc::kernels::cpu;
using namespace odc::kernels::test;

constexpr double kEps = 1e-5;

void reference_rmsnorm(const std::vector<double>& x, const std::vector<double>& w,
                       std::vector<double>& y, std::vector<double>& rstd, int rows, int dim) {
  y.resize(x.size());
  rstd.resize(std::size_t(rows));
  for (int r = 0; r < rows; ++r) {
    double ms = 0;
    for (int i = 0; i < dim; ++i) ms += x[r * dim + i] * x[r * dim + i];
    rstd[r] = 1.0 / std::sqrt(ms / dim + kEps);
    for (int i = 0; i < dim; ++i) y[r * dim + i] = x[r * dim + i] * rstd[r] * w[i];
  }
}

}  // namespace

TEST_CASE("rmsnorm forward matches the definition", "[kernels][rmsnorm]") {
  const int rows = 6, dim = 259;  // odd width exercises the unrolled reductions' tail
  auto x = random_vector(rows * dim, 1, -3.0, 3.0);
  // One row of tiny values: eps dominates mean(x^2), checking it is added inside the sqrt.
  for (int i = 0; i < dim; ++i) x[i] *= 1e-4;
  const auto w = random_vector(dim, 2, 0.5, 1.5);
  std::vector<double> y_ref, rstd_ref;
  reference_rmsnorm(x, w, y_ref, rstd_ref, rows, dim);

  const auto xf = convert<float>(x), wf = convert<float>(w);
  std::vector<float> yf(x.size()), rstdf(rows);
  rmsnorm_forward<float>(xf.data(), wf.data(), yf.data(), rstdf.data(), rows, dim, kEps);
  // Each output is three float roundings (inputs, rstd, two products) away from exact: 1e-6
  // relative to the output scale is ~16 ulp.
  CHECK(relative_error(yf, y_ref) < 1e-6);
  for (int r = 0; r < rows; ++r) CHECK(rstdf[r] == Approx(rstd_ref[r]).epsilon(1e-6));

  std::vector<double> yd(x.size()), rstdd(rows);
  rmsnorm_forward<double>(x.data(), w.data(), yd.data(), rstdd.data(), rows, dim, kEps);
  CHECK(relative_error(yd, y_ref) < 1e-14);
}

TEST_CASE("rmsnorm backward matches central finite differences in double", "[kernels][rmsnorm]") {
  const int rows = 4, dim = 19;
  auto x = random_vector(rows * dim, 3, -2.0, 2.0);
  auto w = random_vector(dim, 4, 0.5, 1.5);
  const auto dy = random_vector(rows * dim, 5);  // loss = sum(y * dy)
  auto loss = [&] {
    std::vector<double> y(x.size()), rstd(rows);
    rmsnorm_forward<double>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
    return dot(y, dy);
  };
  std::vector<double> y(x.size()), rstd(rows);
  rmsnorm_forward<double>(x.data(), w.data(), y.data(), rstd.data(), rows, dim, kEps);
  std::vector<double> dx(x.size(), std::nan("")), dw(dim, 0.0);
  rmsnorm_backward<double>(dy.data(), x.data(), w.data(), rstd.data(), dx.data(), dw.data(), rows,
                           dim, false);
  CHECK(gradient_error(dx, x, loss) < 1e-6);
  CHECK(gradient_error(dw, w, loss) < 1e-6);

  SECTION("dx_accumulate adds into dx and dweight always accumulates") {
    auto dx2 = random_vector(x.size(), 6);
    const auto dx2_before = dx2;
    auto dw2 = dw;
    rmsnorm_backward<double>(dy.data(), x.data(), w.data(), rstd.data(), dx2.data(), dw2.data(),
                             rows, dim, true);
    for (std::size_t i = 0; i < dx2.size(); ++i) {
      CHECK(dx2[i] == Approx(dx2_before[i] + dx[i]).margin(1e-14));
    }
    for (int i = 0; i < dim; ++i) CHECK(dw2[i] == Approx(2 * dw[i]).margin(1e-14));
  }

  SECTION("the float backward agrees with the double backward") {
    const auto xf = convert<float>(x), wf = convert<float>(w), dyf = convert<float>(dy);
    std::vector<float> yf(x.size()), rstdf(rows), dxf(x.size()), dwf(dim, 0.0f);
    rmsnorm_forward<float>(xf.data(), wf.data(), yf.data(), rstdf.data(), rows, dim, kEps);
    rmsnorm_backward<float>(dyf.data(), xf.data(), wf.data(), rstdf.data(), dxf.data(), dwf.data(),
                            rows, dim, false);
    // A handful of float roundings per element plus a 19-term float sum for dweight.
    CHECK(relative_error(dxf, dx) < 1e-5);
    CHECK(relative_error(dwf, dw) < 1e-5);
  }
}
