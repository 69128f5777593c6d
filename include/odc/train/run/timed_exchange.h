#pragma once
// The context exchange as the trainer lends it to the model: every exchange passed on to the
// run's (distributed/transport/context), its wall time summed for the step's metrics
// (StepResult::context_exchange_s: waiting for the group's members and copying their rows).
#include <chrono>

#include "odc/model/context_split.h"

namespace odc::train {

class TimedContextExchange final : public model::ContextExchange {
 public:
  explicit TimedContextExchange(model::ContextExchange& inner) : inner_(inner) {}
  void exchange(const model::ContextSplit& split, std::span<const model::ExchangePiece> pieces, const void* mine,
                std::int64_t mine_bytes, void* into, std::int64_t into_bytes, std::string_view what) override {
    const auto start = std::chrono::steady_clock::now();
    inner_.exchange(split, pieces, mine, mine_bytes, into, into_bytes, what);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++count_;
  }
  double seconds() const { return seconds_; }
  std::int64_t count() const { return count_; }

 private:
  model::ContextExchange& inner_;
  double seconds_ = 0.0;
  std::int64_t count_ = 0;
};

}  // namespace odc::train
