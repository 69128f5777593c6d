#pragma once
// Learning-rate schedule: linear warmup from lr/warmup_steps to lr over `warmup_steps` steps, then
// cosine, linear or constant decay to `min_lr` at `total_steps`. Steps count from 0.
#include <cstdint>
#include <string>

namespace odc::optim {

struct LrSchedule {
  double lr = 3e-4;
  double min_lr = 0.0;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1;
  std::string kind = "cosine";  // cosine | linear | constant

  double at(std::int64_t step) const;
};

}  // namespace odc::optim
