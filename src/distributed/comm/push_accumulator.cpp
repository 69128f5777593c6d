#include "odc/distributed/comm/push_accumulator.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::distributed {

PushAccumulator::PushAccumulator(const ShardLayout& layout, float* grads, bool deterministic,
                                 AccumulatorMemory& memory, float* client_buffers)
    : layout_(layout), grads_(grads), deterministic_(deterministic), memory_(memory), buffers_(client_buffers) {
  if (!deterministic_) return;
  if (buffers_ == nullptr) {
    ODC_CHECK(memory.host_visible(), "device accumulators need their client buffers given");
    own_buffers_.assign(static_cast<std::size_t>(layout.world_size() * layout.owned_elements()), 0.0f);
    buffers_ = own_buffers_.data();
  }
  applied_.assign(static_cast<std::size_t>(layout.world_size() * layout.num_units()), 0);
}

float* PushAccumulator::client_buffer(int client) const {
  return buffers_ + static_cast<std::int64_t>(client) * layout_.owned_elements();
}

void PushAccumulator::begin() {
  if (!deterministic_) return;
  memory_.zero(buffers_, layout_.world_size() * layout_.owned_elements());
  std::fill(applied_.begin(), applied_.end(), 0);
  held_.clear();
}

bool PushAccumulator::ready(int client, int unit, std::int32_t sequence) const {
  // Every chunk of pushes 0..sequence-1 of this unit covers the shard once: all applied exactly
  // when the count of applied elements reaches sequence shards.
  const std::int64_t applied = applied_[static_cast<std::size_t>(client * layout_.num_units() + unit)];
  return applied >= static_cast<std::int64_t>(sequence) * layout_.unit(unit).shard;
}

void PushAccumulator::apply(int client, int unit, std::int64_t offset, const float* data, std::int64_t count) {
  memory_.add(client_buffer(client) + layout_.owned_offset(unit) + offset, data, count);
  applied_[static_cast<std::size_t>(client * layout_.num_units() + unit)] += count;
}

void PushAccumulator::add(int client, int unit, std::int32_t sequence, std::int64_t offset, const float* data,
                          std::int64_t count) {
  if (client < 0 || client >= layout_.world_size() || unit < 0 || unit >= layout_.num_units() || sequence < 0 ||
      offset < 0 || count < 0 || offset + count > layout_.unit(unit).shard) {
    fail("rank {}: invalid gradient push from rank {} (unit {}, push {}, offset {}, count {})", layout_.rank(), client,
         unit, sequence, offset, count);
  }
  if (!deterministic_) {
    memory_.add(grads_ + layout_.owned_offset(unit) + offset, data, count);
    return;
  }
  if (!ready(client, unit, sequence)) {
    if (!memory_.host_visible()) {
      fail("rank {}: gradient push {} of unit {} from rank {} arrived before its predecessors on a transport that "
           "delivers in order",
           layout_.rank(), sequence, unit, client);
    }
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

void PushAccumulator::finish() {
  if (!deterministic_) return;
  if (!held_.empty()) {
    const Held& h = held_.front();
    fail("deterministic accumulation: {} gradient push(es) still held at the end of the minibatch (first: rank {}, "
         "unit {}, push {}): an earlier push of theirs never arrived",
         held_.size(), h.client, h.unit, h.sequence);
  }
  for (int c = 0; c < layout_.world_size(); ++c) memory_.fold(grads_, client_buffer(c), layout_.owned_elements());
}

std::int64_t PushAccumulator::bytes() const {
  if (!deterministic_) return 0;
  return static_cast<std::int64_t>(layout_.world_size()) * layout_.owned_elements() * static_cast<std::int64_t>(sizeof(float));
}

}  // namespace odc::distributed
