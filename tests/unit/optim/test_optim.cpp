// LR schedule shapes (cosine, linear, constant, wsd, inverse_sqrt) and the clip coefficient.
#include <algorithm>
#include <cmath>
#include <cstdint>
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

TEST_CASE("warmup_from_zero: lr * s / warmup as transformers' schedulers, the same after warmup", "[optim]") {
  LrSchedule ours{1.0, 0.1, 4, 14, "cosine"};
  LrSchedule hf = ours;
  hf.warmup_from_zero = true;
  // transformers' get_cosine_with_min_lr_schedule_with_warmup: s / W in warmup, then the cosine
  // from W to total with min_lr as the floor (the same formula as ours).
  for (std::int64_t s = 0; s < 20; ++s) {
    const double p = std::clamp((static_cast<double>(s) - 4.0) / 10.0, 0.0, 1.0);
    const double expected = s < 4 ? static_cast<double>(s) / 4.0 : 0.1 + 0.9 * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
    CHECK(hf.at(s) == Approx(expected).epsilon(1e-12));
    if (s >= 4) CHECK(hf.at(s) == ours.at(s));
  }
  CHECK(hf.at(0) == 0.0);
  CHECK(ours.at(0) == 0.25);
}

// Exact values from the formulas in lr_schedule.h (Approx's 1e-12 covers only the rounding of
// the few double operations each value takes).
TEST_CASE("wsd: warmup, constant, then a linear decay over the last decay_steps to min_lr", "[optim]") {
  LrSchedule s{1.0, 0.1, 4, 14, "wsd", 5};  // the decay starts at step 14 - 5 = 9
  CHECK(s.at(0) == Approx(0.25).epsilon(1e-12));
  CHECK(s.at(3) == Approx(1.0).epsilon(1e-12));
  CHECK(s.at(4) == 1.0);
  CHECK(s.at(8) == 1.0);
  CHECK(s.at(9) == 1.0);
  CHECK(s.at(10) == Approx(1.0 - 0.9 * 1.0 / 5.0).epsilon(1e-12));  // 0.82
  CHECK(s.at(13) == Approx(1.0 - 0.9 * 4.0 / 5.0).epsilon(1e-12));  // 0.28, the last step trained
  CHECK(s.at(14) == Approx(0.1).epsilon(1e-12));
  CHECK(s.at(50) == Approx(0.1).epsilon(1e-12));
  // A decay longer than what follows warmup starts when warmup ends.
  LrSchedule overlap{1.0, 0.1, 4, 6, "wsd", 5};
  CHECK(overlap.at(3) == Approx(1.0).epsilon(1e-12));
  CHECK(overlap.at(4) == 1.0);
  CHECK(overlap.at(5) == Approx(0.55).epsilon(1e-12));
  // No decay steps: constant to the end.
  LrSchedule flat{1.0, 0.1, 0, 10, "wsd", 0};
  CHECK(flat.at(9) == 1.0);
}

TEST_CASE("inverse_sqrt: lr * sqrt(warmup / (step + 1)) after warmup, floored at min_lr", "[optim]") {
  LrSchedule s{1.0, 0.1, 4, 10, "inverse_sqrt"};
  CHECK(s.at(3) == Approx(1.0).epsilon(1e-12));                    // end of warmup
  CHECK(s.at(4) == Approx(std::sqrt(4.0 / 5.0)).epsilon(1e-12));   // 0.894...
  CHECK(s.at(15) == Approx(0.5).epsilon(1e-12));
  CHECK(s.at(63) == Approx(0.25).epsilon(1e-12));
  CHECK(s.at(399) == Approx(0.1).epsilon(1e-12));
  CHECK(s.at(1599) == 0.1);  // sqrt(4/1600) = 0.05, floored
  s.total_steps = 1000;      // total_steps plays no part
  CHECK(s.at(15) == Approx(0.5).epsilon(1e-12));
  LrSchedule no_warmup{2.0, 0.0, 0, 10, "inverse_sqrt"};
  CHECK(no_warmup.at(0) == 2.0);
  CHECK(no_warmup.at(3) == Approx(1.0).epsilon(1e-12));
  CHECK(no_warmup.at(99) == Approx(0.2).epsilon(1e-12));
}

TEST_CASE("clip coefficient follows torch.nn.utils.clip_grad_norm_", "[optim]") {
  CHECK(odc::optim::clip_coefficient(0.5, 1.0) == 1.0);
  CHECK(odc::optim::clip_coefficient(4.0, 1.0) == Approx(1.0 / (4.0 + 1e-6)));
  CHECK(odc::optim::clip_coefficient(4.0, 0.0) == 1.0);  // disabled
}
