#include "odc/distributed/comm/staged_comm.h"

#include <span>

#include "odc/core/error.h"

namespace odc::distributed {

StagedComm::StagedComm(std::unique_ptr<Comm> inner, ShardStore& host_store, ShardStore& device_store,
                       backend::Backend& device, std::unique_ptr<ShardStore> owned_host_store)
    : owned_host_store_(std::move(owned_host_store)),
      owned_inner_(std::move(inner)),
      inner_(*owned_inner_),
      host_store_(host_store),
      device_store_(device_store),
      device_(device),
      grad_staging_(device.memory(), DType::f32) {
  ODC_CHECK(host_store.layout().owned_elements() == device_store.layout().owned_elements() &&
                host_store.layout().num_units() == device_store.layout().num_units(),
            "host staging between stores of different layouts");
  ODC_CHECK(host_store.device() == nullptr, "the staged comm's inner store must hold host memory");
}

backend::Buffer StagedComm::take_buffer() {
  if (spare_.empty()) return backend::Buffer(device_.memory(), DType::f32);
  backend::Buffer b = std::move(spare_.back());
  spare_.pop_back();
  return b;
}

void StagedComm::begin_minibatch() {
  ODC_CHECK(weights_.empty() && gradients_.empty(), "staged units still held at minibatch start");
  // Peers gather from the host copy of the masters the optimizer just updated on the device.
  device_.download(device_store_.masters_view(), host_store_.host_masters());
  inner_.begin_minibatch();
}

const float* StagedComm::acquire(int unit) {
  ODC_CHECK(weights_.find(unit) == weights_.end(), "unit {} acquired twice", unit);
  const float* host = inner_.acquire(unit);
  backend::Buffer buffer = take_buffer();
  // The device's copy (the host memory itself on a host backend, where the inner comm keeps it
  // until release).
  const backend::ConstView v =
      device_.upload(std::span<const float>(host, static_cast<std::size_t>(padded(unit))), buffer);
  weights_.emplace(unit, std::move(buffer));
  return static_cast<const float*>(v.data);
}

void StagedComm::release(int unit) {
  const auto it = weights_.find(unit);
  ODC_CHECK(it != weights_.end(), "release of unit {} that is not acquired", unit);
  spare_.push_back(std::move(it->second));
  weights_.erase(it);
  inner_.release(unit);
}

float* StagedComm::grad_buffer(int unit) {
  ODC_CHECK(gradients_.find(unit) == gradients_.end(), "gradient buffer of unit {} requested twice", unit);
  backend::Buffer buffer = take_buffer();
  const backend::View v = buffer.get(padded(unit));
  device_.zero(v);
  auto* data = static_cast<float*>(v.data);
  gradients_.emplace(unit, std::move(buffer));
  return data;
}

void StagedComm::push_grad(int unit) {
  const auto it = gradients_.find(unit);
  ODC_CHECK(it != gradients_.end(), "push of unit {} without an open gradient buffer", unit);
  // The inner comm's buffer is zeroed when handed out: the download replaces it with the gradient.
  float* host = inner_.grad_buffer(unit);
  device_.download(it->second.get(padded(unit)), std::span<float>(host, static_cast<std::size_t>(padded(unit))));
  spare_.push_back(std::move(it->second));
  gradients_.erase(it);
  inner_.push_grad(unit);
}

void StagedComm::end_minibatch() {
  inner_.end_minibatch();
  // Every rank's pushes are in the host accumulators: the optimizer reads the device's.
  const std::span<const float> host(host_store_.grad(0), static_cast<std::size_t>(host_store_.layout().owned_elements()));
  device_.copy(device_.upload(host, grad_staging_), device_store_.grads_view());
  device_.synchronize();
}

}  // namespace odc::distributed
