#include "odc/distributed/comm/unit_buffer_pool.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>

#include "odc/core/error.h"

namespace odc::distributed {

UnitBufferPool::UnitBufferPool(const ShardLayout& layout, UnitTransport& transport, backend::Backend* device)
    : layout_(layout),
      transport_(transport),
      device_(device != nullptr && device->device().kind != DeviceKind::cpu ? device : nullptr),
      weights_(kWeightBuffers),
      grads_(kGradBuffers) {}

std::int64_t UnitBufferPool::planned_floats(const ShardLayout& layout) {
  // One buffer of each kind at the largest unit (the embedding-sized units, more than half the
  // largest, take turns in it: the model holds or moves one at a time, and a tied embedding stays
  // in its buffer while the head reuses it), the others at the largest of the remaining units.
  const std::int64_t largest = layout.largest_padded_unit();
  std::int64_t other = 0;
  for (int u = 0; u < layout.num_units(); ++u) {
    if (!is_large(layout.unit(u).padded, largest)) other = std::max(other, layout.unit(u).padded);
  }
  if (other == 0) other = largest;
  return (largest + (kWeightBuffers - 1) * other) + (largest + (kGradBuffers - 1) * other);
}

std::int64_t UnitBufferPool::allocated_floats() const {
  std::int64_t total = 0;
  for (const auto* kind : {&weights_, &grads_}) {
    for (const Buffer& b : *kind) total += b.capacity;
  }
  return total;
}

void UnitBufferPool::fit(Buffer& b, std::int64_t floats) {
  if (b.capacity >= floats) return;
  // Grown only while idle (no transfer reads or writes it); the old storage goes first.
  b.host = Tensor();
  b.on_device.reset();
  if (device_ == nullptr) {
    b.host = Tensor(Shape{floats}, DType::f32);
    b.data = b.host.data<float>();
  } else {
    b.on_device.emplace(device_->memory(), DType::f32);
    b.data = static_cast<float*>(b.on_device->get(floats).data);
  }
  b.capacity = floats;
}

int UnitBufferPool::best_fit(const std::vector<Buffer>& buffers, const std::vector<int>& candidates,
                             std::int64_t floats) const {
  // A unit that is not embedding-sized keeps off the buffers that are, while another will do, so
  // that the large units keep taking turns in one buffer.
  const std::int64_t largest = layout_.largest_padded_unit();
  std::vector<int> usable;
  if (!is_large(floats, largest)) {
    for (const int i : candidates) {
      if (!is_large(buffers[static_cast<std::size_t>(i)].capacity, largest)) usable.push_back(i);
    }
  }
  if (usable.empty()) usable = candidates;
  // The smallest that holds `floats`, else the largest (it grows least).
  int chosen = -1;
  for (const int i : usable) {
    if (chosen < 0) {
      chosen = i;
      continue;
    }
    const std::int64_t c = buffers[static_cast<std::size_t>(i)].capacity;
    const std::int64_t best = buffers[static_cast<std::size_t>(chosen)].capacity;
    const bool fits = c >= floats;
    const bool best_fits = best >= floats;
    if ((fits && (!best_fits || c < best)) || (!fits && !best_fits && c > best)) chosen = i;
  }
  return chosen;
}

void UnitBufferPool::zero(float* data, std::int64_t floats) {
  if (device_ == nullptr) {
    std::memset(data, 0, static_cast<std::size_t>(floats) * sizeof(float));
  } else {
    device_->zero(backend::View{data, DType::f32, device_->device(), floats});
  }
}

void UnitBufferPool::wait(bool gather, int unit, int buffer) {
  if (gather ? transport_.gather_done(buffer) : transport_.push_done(buffer)) {
    // Done already: the wait only reports errors of the completed transfer.
    gather ? transport_.wait_gather(unit, buffer) : transport_.wait_push(unit, buffer);
    return;
  }
  const char* kind = draining_ ? "barrier wait " : gather ? "gather wait " : "push wait ";
  const TraceScope trace(tracer_, "wait", kind + layout_.unit(unit).name, {{"unit", unit}});
  const auto start = std::chrono::steady_clock::now();
  gather ? transport_.wait_gather(unit, buffer) : transport_.wait_push(unit, buffer);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  (draining_ ? waits_.barrier_s : gather ? waits_.gather_s : waits_.push_s) += waited;
}

int UnitBufferPool::find_weights(int unit) const {
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    if (weights_[i].unit == unit) return static_cast<int>(i);
  }
  return -1;
}

int UnitBufferPool::free_weights(int unit) const {
  std::vector<int> free;
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    if (!weights_[i].held && !weights_[i].in_flight) free.push_back(static_cast<int>(i));
  }
  return free.empty() ? -1 : best_fit(weights_, free, layout_.unit(unit).padded);
}

int UnitBufferPool::start_gather(int unit) {
  const int b = free_weights(unit);
  ODC_CHECK(b >= 0, "no free weight buffer for unit {}", unit);
  Buffer& buffer = weights_[static_cast<std::size_t>(b)];
  fit(buffer, layout_.unit(unit).padded);
  buffer.unit = unit;
  buffer.in_flight = true;
  transport_.start_gather(unit, b, buffer.data);
  return b;
}

void UnitBufferPool::prefetch(int unit) {
  if (unit < 0 || unit >= layout_.num_units() || find_weights(unit) >= 0) return;
  // Only into a buffer nobody holds; otherwise the acquire gathers on demand.
  if (free_weights(unit) >= 0) start_gather(unit);
}

const float* UnitBufferPool::acquire(int unit) {
  int b = find_weights(unit);
  if (b < 0) b = start_gather(unit);
  Buffer& buffer = weights_[static_cast<std::size_t>(b)];
  ODC_CHECK(!buffer.held, "unit {} acquired twice", unit);
  if (buffer.in_flight) {
    wait(true, unit, b);
    buffer.in_flight = false;
  }
  buffer.held = true;
  return buffer.data;
}

void UnitBufferPool::release(int unit) {
  const int b = find_weights(unit);
  ODC_CHECK(b >= 0 && weights_[static_cast<std::size_t>(b)].held, "release of unit {} that is not acquired", unit);
  // The buffer may serve another unit now: a later acquire of this unit gathers again.
  weights_[static_cast<std::size_t>(b)].held = false;
  weights_[static_cast<std::size_t>(b)].unit = -1;
}

float* UnitBufferPool::grad_buffer(int unit) {
  // The best fit among the buffers with no push in flight; if every free buffer is still pushing,
  // among those (waiting for its push). (Which buffer drains first decides the order in which the collective adds
  // reduced slices into the accumulator; the choice depends only on the units' order and sizes,
  // so it is the same on every run.)
  std::vector<int> idle;
  std::vector<int> pushing;
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    const Buffer& g = grads_[i];
    ODC_CHECK(!(g.held && g.unit == unit), "gradient buffer of unit {} requested twice", unit);
    if (g.held) continue;
    if (g.in_flight) {
      pushing.push_back(static_cast<int>(i));
    } else {
      idle.push_back(static_cast<int>(i));
    }
  }
  const int chosen = idle.empty() && pushing.empty() ? -1 : best_fit(grads_, idle.empty() ? pushing : idle, layout_.unit(unit).padded);
  ODC_CHECK(chosen >= 0, "no free gradient buffer for unit {}", unit);
  Buffer& buffer = grads_[static_cast<std::size_t>(chosen)];
  if (buffer.in_flight) {
    // A buffer is reused only after every owner has taken its data.
    wait(false, buffer.unit, chosen);
    buffer.in_flight = false;
    transport_.finish_push(buffer.unit, chosen);
  }
  fit(buffer, layout_.unit(unit).padded);
  buffer.unit = unit;
  buffer.held = true;
  zero(buffer.data, layout_.unit(unit).padded);
  return buffer.data;
}

void UnitBufferPool::push_grad(int unit) {
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    Buffer& g = grads_[i];
    if (!(g.held && g.unit == unit)) continue;
    g.held = false;
    g.in_flight = true;
    transport_.start_push(unit, static_cast<int>(i), g.data);
    return;
  }
  ODC_CHECK(false, "push of unit {} without an open gradient buffer", unit);
}

void UnitBufferPool::check_idle() const {
  for (const auto& w : weights_) {
    ODC_CHECK(!w.held && !w.in_flight, "weights of unit {} still held at minibatch start", w.unit);
  }
  for (const auto& g : grads_) {
    ODC_CHECK(!g.held && !g.in_flight, "gradient of unit {} still open at minibatch start", g.unit);
  }
}

void UnitBufferPool::drain() {
  struct Draining {
    bool& flag;
    explicit Draining(bool& f) : flag(f) { flag = true; }
    ~Draining() { flag = false; }
  } const draining(draining_);
  for (std::size_t i = 0; i < grads_.size(); ++i) {
    Buffer& g = grads_[i];
    ODC_CHECK(!g.held, "gradient of unit {} never pushed", g.unit);
    if (!g.in_flight) continue;
    wait(false, g.unit, static_cast<int>(i));
    g.in_flight = false;
    transport_.finish_push(g.unit, static_cast<int>(i));
  }
  for (std::size_t i = 0; i < weights_.size(); ++i) {
    Buffer& w = weights_[i];
    if (w.in_flight) {
      wait(true, w.unit, static_cast<int>(i));
      w.in_flight = false;
    }
    if (!w.held) w.unit = -1;
  }
}

}  // namespace odc::distributed
