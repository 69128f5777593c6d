#include "odc/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "odc/core/error.h"

namespace odc::optim {

double LrSchedule::at(std::int64_t step) const {
  if (step < warmup_steps) {
    return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (kind == "constant") return lr;
  const double span = static_cast<double>(std::max<std::int64_t>(1, total_steps - warmup_steps));
  const double progress = std::clamp(static_cast<double>(step - warmup_steps) / span, 0.0, 1.0);
  if (kind == "cosine") return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  if (kind == "linear") return lr - (lr - min_lr) * progress;
  fail("unknown learning-rate schedule '{}' (expected cosine, linear or constant)", kind);
}

}  // namespace odc::optim
