// LR schedule shapes and the clip coefficient.
#include <cmath>
#include <numbers>

#include <catch2/catch.hpp>

#include "odc/optim/lr_schedule.h"
#include "odc/optim/sharded_adamw.h"

using odc::optim::LrSchedule;

TEST_CASE("warmup rises linearly, then cosine/linear/constant decay to min_lr", "[optim]") {
  LrSchedule s{1.0, 0.1, 4, 14, "cosine"};
  CHECK(s.at(0) == Approx(0.25));
  CHECK(s.at(3) == Approx(1.0));
  CHECK(s.at(4) == Approx(1.0));
  CHECK(s.at(9) == Approx(0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.5))));
  CHECK(s.at(14) == Approx(0.1));
  CHECK(s.at(100) == Approx(0.1));  // stays at the floor past the end
  s.kind = "linear";
  CHECK(s.at(9) == Approx(0.55));
  s.kind = "constant";
  CHECK(s.at(12) == Approx(1.0));
  s.kind = "exponential";
  CHECK_THROWS_WITH(s.at(5), Catch::Contains("unknown learning-rate schedule 'exponential'"));
}

TEST_CASE("clip coefficient follows torch.nn.utils.clip_grad_norm_", "[optim]") {
  CHECK(odc::optim::clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(odc::optim::clip_coefficient(4.0, 1.0) == Approx(1.0 / (4.0 + 1e-6)));
  CHECK(odc::optim::clip_coefficient(4.0, 0.0) == 1.0);  // disabled
}
