#pragma once
// The compute copies a backend makes of fp32 units at its precision boundary (Backend::weights /
// release_weights), keyed by the unit's pointer: the same copy while a unit is live, and a
// released copy's storage kept for the next unit, so a steady state of acquires and releases
// allocates (and zero-fills) nothing. At most as many storages exist as units were live at once.
//
// Kept copies (set_keep(true), Backend::keep_weight_copies): where a unit's pointer always names
// the same unit and its contents change only between optimizer steps (a one-rank run computes on
// the masters themselves), a released copy stays with its unit and the next acquire reuses it
// without redoing it, until invalidate() (Backend::weights_changed, once per step): the copies are
// then made once per step instead of at every acquire, at the price of one copy of every unit.
// forget() (Backend::forget_weight_copies) drops the kept copies when their pointers stop naming
// those units (a weight snapshot made or freed): their storages become spares, so however many
// pointer sets come and go, no more storages exist than units were kept or live at once.
#include <unordered_map>
#include <utility>
#include <vector>

namespace odc::backend {

template <typename Storage>
class WeightCopies {
 public:
  // The live copy of `unit` and whether the caller must fill it (new, or kept but stale). `make`
  // builds a storage when no released one is left.
  template <typename Make>
  std::pair<Storage&, bool> acquire(const float* unit, Make&& make) {
    if (const auto it = live_.find(unit); it != live_.end()) return {it->second, false};
    if (const auto it = kept_.find(unit); it != kept_.end()) {
      const bool stale = it->second.second;
      Storage storage = std::move(it->second.first);
      kept_.erase(it);
      return {live_.emplace(unit, std::move(storage)).first->second, stale};
    }
    Storage storage = spare_.empty() ? make() : take_spare();
    return {live_.emplace(unit, std::move(storage)).first->second, true};
  }
  // Nothing happens for a unit without a live copy.
  void release(const float* unit) {
    if (const auto it = live_.find(unit); it != live_.end()) {
      if (keep_) {
        kept_.insert_or_assign(unit, std::make_pair(std::move(it->second), false));
      } else {
        spare_.push_back(std::move(it->second));
      }
      live_.erase(it);
    }
  }
  // Keeping off returns every kept copy's storage to the spares.
  void set_keep(bool keep) {
    keep_ = keep;
    if (!keep_) forget();
  }
  bool keep() const { return keep_; }
  // The units' contents changed: every kept copy is redone at its next acquire (live copies are
  // the caller's until released: a step changes no unit while one is acquired).
  void invalidate() {
    for (auto& [unit, copy] : kept_) copy.second = true;
  }
  // The kept copies' pointers no longer name their units: their storages become spares (live
  // copies stay the caller's).
  void forget() {
    for (auto& [unit, copy] : kept_) spare_.push_back(std::move(copy.first));
    kept_.clear();
  }
  std::size_t spares() const { return spare_.size(); }
  std::size_t live() const { return live_.size(); }
  std::size_t kept() const { return kept_.size(); }
  void clear() {
    live_.clear();
    kept_.clear();
    spare_.clear();
  }

 private:
  Storage take_spare() {
    Storage s = std::move(spare_.back());
    spare_.pop_back();
    return s;
  }
  bool keep_ = false;
  std::unordered_map<const float*, Storage> live_;
  std::unordered_map<const float*, std::pair<Storage, bool>> kept_;  // storage, stale
  std::vector<Storage> spare_;
};

}  // namespace odc::backend
