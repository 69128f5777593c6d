#pragma once
// Calibration of the quadratic cost model: times forward+backward of single sequences of several
// lengths on this model and machine, and fits cost = a*s^2 + b*s (normalized so b = 1, i.e. the
// cost of a short sequence is about its token count).
#include <cstdint>
#include <vector>

#include "odc/core/config.h"
#include "odc/data/planner.h"

namespace odc::train {

struct CalibrationPoint {
  std::int64_t length = 0;
  double seconds = 0.0;  // median of the timed repetitions
};

data::CostModel calibrate_cost_model(const Config& config, std::vector<CalibrationPoint>* points);

}  // namespace odc::train
