// The planner's cost models on exact numbers: linear is the token count, quadratic validates its
// coefficients, flops follows linear*s + pair*s(s+1)/2, and fit_quadratic recovers, clamps and
// rejects.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/cost_model.h"

using odc::data::CostModel;

TEST_CASE("planner: cost models", "[planner]") {
  SECTION("linear is the token count") {
    REQUIRE(CostModel::linear().cost(1000) == 1000.0);
    REQUIRE(CostModel().kind == "linear");
  }
  SECTION("quadratic validates its coefficients") {
    REQUIRE(CostModel::quadratic(2.0, 3.0).cost(10) == 230.0);
    REQUIRE_THROWS_AS(CostModel::quadratic(-1.0, 1.0), odc::Error);
    REQUIRE_THROWS_AS(CostModel::quadratic(0.0, 0.0), odc::Error);
    REQUIRE_THROWS_AS(CostModel::quadratic(std::nan(""), 1.0), odc::Error);
  }
  SECTION("flops: linear*s + pair*s(s+1)/2, divided by the linear term") {
    // A 7B-like shape: 6 * 6.5e9 linear FLOPs per token, 12 * 4096 * 32 per causal pair.
    const double linear = 6.0 * 6.5e9;
    const double pair = 12.0 * 4096.0 * 32.0;
    const auto model = CostModel::flops(linear, pair);
    REQUIRE(model.kind == "flops");
    for (std::int64_t s : {1, 100, 4096, 65536}) {
      const double sd = static_cast<double>(s);
      const double flops = linear * sd + pair * sd * (sd + 1.0) / 2.0;
      REQUIRE(model.cost(s) == Approx(flops / linear).epsilon(1e-12));
    }
    REQUIRE(model.cost(1) == Approx(1.0).epsilon(1e-4));  // short sequences cost about their tokens
    REQUIRE_THROWS_AS(CostModel::flops(0.0, 1.0), odc::Error);
    REQUIRE_THROWS_AS(CostModel::flops(1.0, -1.0), odc::Error);
  }
}

TEST_CASE("planner: fit_quadratic", "[planner]") {
  SECTION("recovers exact coefficients") {
    const std::vector<std::int64_t> lengths = {512, 1024, 4096, 16384, 65536};
    std::vector<double> seconds;
    for (auto s : lengths) seconds.push_back(3e-9 * double(s) * double(s) + 2e-5 * double(s));
    const auto fit = odc::data::fit_quadratic(lengths, seconds);
    REQUIRE(fit.kind == "quadratic");
    REQUIRE(fit.a == Approx(3e-9).epsilon(1e-9));
    REQUIRE(fit.b == Approx(2e-5).epsilon(1e-9));
  }
  SECTION("a negative curvature is clamped to 0 and b refitted alone") {
    const std::vector<std::int64_t> lengths = {100, 200, 300};
    const std::vector<double> seconds = {1.0, 1.5, 1.6};  // concave: unconstrained a < 0
    const auto fit = odc::data::fit_quadratic(lengths, seconds);
    REQUIRE(fit.a == 0.0);
    // 1-D least squares through the origin: b = sum(s*y) / sum(s^2).
    REQUIRE(fit.b == Approx((100 * 1.0 + 200 * 1.5 + 300 * 1.6) /
                            (100.0 * 100 + 200.0 * 200 + 300.0 * 300)));
  }
  SECTION("errors") {
    REQUIRE_THROWS_WITH(odc::data::fit_quadratic({512, 512}, {1.0, 1.1}),
                        Catch::Contains("distinct"));
    REQUIRE_THROWS_AS(odc::data::fit_quadratic({512, 1024}, {1.0}), odc::Error);
    REQUIRE_THROWS_WITH(odc::data::fit_quadratic({512, 1024}, {-1.0, -2.0}),
                        Catch::Contains("positive"));
  }
}
