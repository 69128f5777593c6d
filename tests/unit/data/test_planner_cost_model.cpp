// The planner's cost models on exact numbers: linear is the token count, quadratic validates its
// coefficients, flops follows linear*s + pair*s(s+1)/2, and fit_quadratic recovers, clamps and
// rejects.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/cost_model.h"
#include "odc/data/data_config.h"

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

TEST_CASE("planner: the measured cost model interpolates time per token", "[planner]") {
  // 0.5 ms/token at 64 and 128, 1 ms at 256, 3 ms at 512.
  const auto model = CostModel::measured({64, 128, 256, 512}, {0.032, 0.064, 0.256, 1.536});
  REQUIRE(model.kind == "measured");
  SECTION("the points themselves, normalized to the first point's time per token") {
    CHECK(model.cost(64) == Approx(64.0));
    CHECK(model.cost(128) == Approx(128.0));
    CHECK(model.cost(256) == Approx(2.0 * 256));
    CHECK(model.cost(512) == Approx(6.0 * 512));
  }
  SECTION("linear per token between points, flat below the first, the last slope beyond the last") {
    CHECK(model.cost(192) == Approx(1.5 * 192));   // halfway 128 -> 256: per token 1 -> 2
    CHECK(model.cost(384) == Approx(4.0 * 384));   // halfway 256 -> 512: 2 -> 6
    CHECK(model.cost(10) == Approx(10.0));
    CHECK(model.cost(1024) == Approx(14.0 * 1024));  // 6 + 8 per 256 tokens beyond 512
  }
  SECTION("four 128-token sequences cost less than one of 512, as attention does") {
    CHECK(4 * model.cost(128) < model.cost(512));
  }
  SECTION("bad points are rejected, naming the point") {
    CHECK_THROWS_WITH(CostModel::measured({64}, {0.1}), Catch::Contains("at least 2"));
    CHECK_THROWS_WITH(CostModel::measured({64, 64}, {0.1, 0.2}), Catch::Contains("point 1 has length 64"));
    CHECK_THROWS_WITH(CostModel::measured({64, 128}, {0.1, 0.0}), Catch::Contains("point 1 (length 128)"));
    CHECK_THROWS_WITH(CostModel::measured({64, 128}, {0.1}), Catch::Contains("2 lengths but 1 timings"));
  }
}

TEST_CASE("planner: data.cost_points parses LENGTH:SECONDS lists and names a bad item", "[planner]") {
  const auto model = odc::data::measured_cost_model("64:0.032,128:0.064,256:0.256");
  CHECK(model.cost(256) == Approx(512.0));
  CHECK_THROWS_WITH(odc::data::measured_cost_model(""), Catch::Contains("needs data.cost_points"));
  CHECK_THROWS_WITH(odc::data::measured_cost_model("64:0.1,128"), Catch::Contains("item 2 '128' is not LENGTH:SECONDS"));
  CHECK_THROWS_WITH(odc::data::measured_cost_model("64:0.1,128:x"), Catch::Contains("item 2 '128:x'"));
  CHECK_THROWS_WITH(odc::data::measured_cost_model("64:0.1,"), Catch::Contains("item 2 ''"));
  CHECK_THROWS_WITH(odc::data::measured_cost_model("64:0.1s,128:0.2"), Catch::Contains("item 1 '64:0.1s'"));
  CHECK_THROWS_WITH(odc::data::measured_cost_model("128:0.1,64:0.2"), Catch::Contains("lengths must be >= 1 and increasing"));
}
