#pragma once
// WeightSnapshot: a copy of every unit's full fp32 weights, taken once from a ParamSource (a
// sharded comm: one acquire and release per unit, in unit order, so ranks whose comm meets in
// lockstep take it together) into a backend's memory, and served from there for as long as it
// lives. What the online RL loop samples from: thousands of decode forwards over weights that do
// not change, without fetching any unit again.
#include <cstdint>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/backend/buffer.h"
#include "odc/model/param_io.h"
#include "odc/model/units.h"

namespace odc::model {

class WeightSnapshot final : public ParamSource {
 public:
  // `backend` outlives the snapshot; its memory holds the copies (sum of the units' sizes, fp32).
  WeightSnapshot(backend::Backend& backend, const std::vector<UnitLayout>& units, ParamSource& source);

  const float* acquire(int unit) override;
  void release(int) override {}  // the copies stay
  std::int64_t bytes() const;

 private:
  std::vector<backend::Buffer> units_;
  std::vector<std::int64_t> numel_;
};

}  // namespace odc::model
