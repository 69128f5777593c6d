#include "odc/model/resident_weights.h"

#include <algorithm>
#include <utility>

#include "odc/core/error.h"

namespace odc::model {

ResidentWeights::ResidentWeights(const std::vector<UnitLayout>& units, const LlamaConfig& config, std::uint64_t seed)
    : pushes_(units.size(), 0) {
  for (const auto& unit : units) {
    weights_.emplace_back(static_cast<std::size_t>(unit.numel));
    gradients_.emplace_back(static_cast<std::size_t>(unit.numel), 0.0f);
    init_unit_range(unit, config, seed, 0, unit.numel, weights_.back().data());
  }
}

ResidentWeights::ResidentWeights(const std::vector<UnitLayout>& units, std::vector<std::vector<float>> weights)
    : weights_(std::move(weights)), pushes_(units.size(), 0) {
  if (weights_.size() != units.size()) {
    fail("resident weights: expected one buffer per unit ({} units), found {} buffers", units.size(), weights_.size());
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (weights_[u].size() != static_cast<std::size_t>(units[u].numel)) {
      fail("resident weights: unit {} ('{}') has {} elements in its layout, its buffer holds {}", u, units[u].name,
           units[u].numel, weights_[u].size());
    }
    gradients_.emplace_back(weights_[u].size(), 0.0f);
  }
}

std::size_t ResidentWeights::index(int unit) const {
  ODC_CHECK(unit >= 0 && unit < num_units(), "unit {} outside [0, {})", unit, num_units());
  return static_cast<std::size_t>(unit);
}

const float* ResidentWeights::acquire(int unit) { return weights_[index(unit)].data(); }

float* ResidentWeights::grad_buffer(int unit) { return gradients_[index(unit)].data(); }

void ResidentWeights::push_grad(int unit) { ++pushes_[index(unit)]; }

std::span<float> ResidentWeights::weights(int unit) { return weights_[index(unit)]; }

std::span<const float> ResidentWeights::weights(int unit) const { return weights_[index(unit)]; }

std::span<float> ResidentWeights::gradients(int unit) { return gradients_[index(unit)]; }

std::span<const float> ResidentWeights::gradients(int unit) const { return gradients_[index(unit)]; }

void ResidentWeights::zero_gradients() {
  for (auto& gradient : gradients_) std::fill(gradient.begin(), gradient.end(), 0.0f);
}

std::int64_t ResidentWeights::pushes(int unit) const { return pushes_[index(unit)]; }

}  // namespace odc::model
