#include "odc/distributed/ordered_accumulator.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::distributed {

OrderedAccumulator::OrderedAccumulator(const ShardLayout& layout) : layout_(layout) {
  per_client_.assign(static_cast<std::size_t>(layout.world_size()),
                     std::vector<float>(static_cast<std::size_t>(layout.owned_elements()), 0.0f));
  applied_.assign(static_cast<std::size_t>(layout.world_size() * layout.num_units()), 0);
}

void OrderedAccumulator::begin() {
  for (auto& buffer : per_client_) std::fill(buffer.begin(), buffer.end(), 0.0f);
  std::fill(applied_.begin(), applied_.end(), 0);
  held_.clear();
}

bool OrderedAccumulator::ready(int client, int unit, std::int32_t sequence) const {
  // Every chunk of pushes 0..sequence-1 of this unit covers the shard once: all applied exactly
  // when the count of applied elements reaches sequence shards.
  const std::int64_t applied = applied_[static_cast<std::size_t>(client * layout_.num_units() + unit)];
  return applied >= static_cast<std::int64_t>(sequence) * layout_.unit(unit).shard;
}

void OrderedAccumulator::apply(int client, int unit, std::int64_t offset, const float* data, std::int64_t count) {
  float* __restrict acc = per_client_[static_cast<std::size_t>(client)].data() + layout_.owned_offset(unit) + offset;
  const float* __restrict in = data;
#pragma omp simd
  for (std::int64_t i = 0; i < count; ++i) acc[i] += in[i];
  applied_[static_cast<std::size_t>(client * layout_.num_units() + unit)] += count;
}

void OrderedAccumulator::add(int client, int unit, std::int32_t sequence, std::int64_t offset, const float* data,
                             std::int64_t count) {
  if (client < 0 || client >= layout_.world_size() || unit < 0 || unit >= layout_.num_units() || sequence < 0 ||
      offset < 0 || count < 0 || offset + count > layout_.unit(unit).shard) {
    fail("invalid ordered gradient push from rank {} (unit {}, push {}, offset {}, count {})", client, unit, sequence,
         offset, count);
  }
  if (!ready(client, unit, sequence)) {
    held_.push_back({client, unit, sequence, offset, std::vector<float>(data, data + count)});
    return;
  }
  apply(client, unit, offset, data, count);
  // Pushes held behind this one may be due now; applying one may free the next.
  for (bool progressed = true; progressed && !held_.empty();) {
    progressed = false;
    for (std::size_t i = 0; i < held_.size(); ++i) {
      const Held& h = held_[i];
      if (!ready(h.client, h.unit, h.sequence)) continue;
      apply(h.client, h.unit, h.offset, h.data.data(), static_cast<std::int64_t>(h.data.size()));
      held_.erase(held_.begin() + static_cast<std::ptrdiff_t>(i));
      progressed = true;
      break;
    }
  }
}

void OrderedAccumulator::fold_into(float* grads) const {
  if (!held_.empty()) {
    const Held& h = held_.front();
    fail("deterministic accumulation: {} gradient push(es) still held at the end of the minibatch (first: rank {}, "
         "unit {}, push {}): an earlier push of theirs never arrived",
         held_.size(), h.client, h.unit, h.sequence);
  }
  const std::size_t n = static_cast<std::size_t>(layout_.owned_elements());
  std::copy(per_client_.front().begin(), per_client_.front().end(), grads);
  for (std::size_t c = 1; c < per_client_.size(); ++c) {
    const float* __restrict in = per_client_[c].data();
    float* __restrict out = grads;
#pragma omp simd
    for (std::size_t i = 0; i < n; ++i) out[i] += in[i];
  }
}

std::int64_t OrderedAccumulator::bytes() const {
  return static_cast<std::int64_t>(per_client_.size()) * layout_.owned_elements() * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace odc::distributed
