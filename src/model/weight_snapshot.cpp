#include "odc/model/weight_snapshot.h"

#include "odc/core/error.h"

namespace odc::model {

WeightSnapshot::WeightSnapshot(backend::Backend& backend, const std::vector<UnitLayout>& units, ParamSource& source) {
  units_.reserve(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    const int unit = static_cast<int>(u);
    const std::int64_t numel = units[u].numel;
    const float* full = source.acquire(unit);
    units_.emplace_back(backend.memory(), DType::f32);
    backend.copy(backend::ConstView{full, DType::f32, backend.device(), numel}, units_.back().get(numel));
    source.release(unit);
    numel_.push_back(numel);
  }
  backend.synchronize();  // the copies are complete before the source's buffers are reused
}

const float* WeightSnapshot::acquire(int unit) {
  ODC_CHECK(unit >= 0 && static_cast<std::size_t>(unit) < units_.size(), "WeightSnapshot: unit {} of {}", unit,
            units_.size());
  const auto u = static_cast<std::size_t>(unit);
  return static_cast<const float*>(units_[u].get(numel_[u]).data);
}

std::int64_t WeightSnapshot::bytes() const {
  std::int64_t total = 0;
  for (const auto n : numel_) total += n * static_cast<std::int64_t>(sizeof(float));
  return total;
}

}  // namespace odc::model
