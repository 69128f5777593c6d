#pragma once
// The compute copies a backend makes of fp32 units at its precision boundary (Backend::weights /
// release_weights), keyed by the unit's pointer: the same copy while a unit is live, and a
// released copy's storage kept for the next unit, so a steady state of acquires and releases
// allocates (and zero-fills) nothing. At most as many storages exist as units were live at once.
#include <unordered_map>
#include <utility>
#include <vector>

namespace odc::backend {

template <typename Storage>
class WeightCopies {
 public:
  // The live copy of `unit` and whether it is new (then the caller fills it). `make` builds a
  // storage when no released one is left.
  template <typename Make>
  std::pair<Storage&, bool> acquire(const float* unit, Make&& make) {
    if (const auto it = live_.find(unit); it != live_.end()) return {it->second, false};
    Storage storage = spare_.empty() ? make() : take_spare();
    return {live_.emplace(unit, std::move(storage)).first->second, true};
  }
  // Nothing happens for a unit without a live copy.
  void release(const float* unit) {
    if (const auto it = live_.find(unit); it != live_.end()) {
      spare_.push_back(std::move(it->second));
      live_.erase(it);
    }
  }
  std::size_t live() const { return live_.size(); }
  void clear() {
    live_.clear();
    spare_.clear();
  }

 private:
  Storage take_spare() {
    Storage s = std::move(spare_.back());
    spare_.pop_back();
    return s;
  }
  std::unordered_map<const float*, Storage> live_;
  std::vector<Storage> spare_;
};

}  // namespace odc::backend
