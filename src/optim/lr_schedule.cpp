#include "odc/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "odc/core/error.h"

namespace odc::optim {

namespace {
// Fraction of the way from step `begin` to step `end`, clamped to [0, 1].
double progress(std::int64_t step, std::int64_t begin, std::int64_t end) {
  const double span = static_cast<double>(std::max<std::int64_t>(1, end - begin));
  return std::clamp(static_cast<double>(step - begin) / span, 0.0, 1.0);
}
}  // namespace

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(warmup_from_zero ? step : step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == "constant") return lr;
  if (kind == "inverse_sqrt") {
    const double warmup = static_cast<double>(std::max<std::int64_t>(1, warmup_steps));
    return std::max(min_lr, lr * std::sqrt(warmup / static_cast<double>(step + 1)));
  }
  if (kind == "wsd") {
    const std::int64_t decay_start = std::max(warmup_steps, total_steps - decay_steps);
    if (step < decay_start) return lr;
    return lr - (lr - min_lr) * progress(step, decay_start, total_steps);
  }
  const double p = progress(step, warmup_steps, total_steps);
  if (kind == "cosine") return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * p));
  if (kind == "linear") return lr - (lr - min_lr) * p;
  fail("unknown learning-rate schedule '{}' (expected cosine, linear, constant, wsd or inverse_sqrt)", kind);
}

}  // namespace odc::optim
