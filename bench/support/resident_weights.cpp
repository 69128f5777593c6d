#include "support/resident_weights.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "odc/core/error.h"

namespace odc::bench {
namespace {

// Host memory of the resident weights without a backend: zero-filled, 64-byte aligned blocks.
class HostBlocks final : public backend::DeviceMemory {
 public:
  Device device() const override { return Device::cpu(); }
  void* allocate(std::size_t bytes) override {
    const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
    void* data = std::aligned_alloc(64, rounded);
    if (data == nullptr) {
      fail("resident weights: cannot allocate {} bytes of host memory for the model's weights and gradients "
           "(free memory, or train a smaller model)",
           bytes);
    }
    std::memset(data, 0, rounded);
    return data;
  }
  void deallocate(void* data, std::size_t) noexcept override { std::free(data); }
};

}  // namespace

// One unit's buffers; the views stay valid for the object's life (the buffers never grow).
struct ResidentWeights::Unit {
  Unit(backend::DeviceMemory& memory, std::int64_t count)
      : numel(count),
        weights(memory, DType::f32),
        gradients(memory, DType::f32),
        exp_avg(memory, DType::f32),
        exp_avg_sq(memory, DType::f32),
        weight_view(weights.get(count)),
        grad_view(gradients.get(count)) {}

  std::int64_t numel;
  backend::Buffer weights, gradients, exp_avg, exp_avg_sq;
  backend::View weight_view, grad_view;
  backend::View exp_avg_view, exp_avg_sq_view;  // empty until the moments are allocated
  std::int64_t pushes = 0;
};

ResidentWeights::ResidentWeights(const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                                 std::uint64_t seed)
    : host_memory_(std::make_unique<HostBlocks>()) {
  place(units);
  for (std::size_t u = 0; u < units.size(); ++u) {
    model::init_unit_range(units[u], config, seed, 0, units[u].numel, weights(static_cast<int>(u)).data());
  }
}

ResidentWeights::ResidentWeights(const std::vector<model::UnitLayout>& units, std::vector<std::vector<float>> weights)
    : host_memory_(std::make_unique<HostBlocks>()) {
  if (weights.size() != units.size()) {
    fail("resident weights: expected one buffer per unit ({} units), found {} buffers", units.size(), weights.size());
  }
  for (std::size_t u = 0; u < units.size(); ++u) {
    if (weights[u].size() != static_cast<std::size_t>(units[u].numel)) {
      fail("resident weights: unit {} ('{}') has {} elements in its layout, its buffer holds {}", u, units[u].name,
           units[u].numel, weights[u].size());
    }
  }
  place(units);
  for (std::size_t u = 0; u < units.size(); ++u) upload_weights(static_cast<int>(u), weights[u]);
}

ResidentWeights::ResidentWeights(backend::Backend& backend, const std::vector<model::UnitLayout>& units,
                                 const model::LlamaConfig& config, std::uint64_t seed)
    : backend_(&backend), staging_(std::make_unique<backend::Buffer>(backend.memory(), DType::f32)) {
  place(units);
  allocate_moments();
  for (std::size_t u = 0; u < units.size(); ++u) {
    std::vector<float> host(static_cast<std::size_t>(units[u].numel));
    model::init_unit_range(units[u], config, seed, 0, units[u].numel, host.data());
    upload_weights(static_cast<int>(u), host);
  }
}

ResidentWeights::ResidentWeights(backend::Backend& backend, const std::vector<model::UnitLayout>& units,
                                 const std::vector<std::vector<float>>& weights)
    : backend_(&backend), staging_(std::make_unique<backend::Buffer>(backend.memory(), DType::f32)) {
  if (weights.size() != units.size()) {
    fail("resident weights: expected one buffer per unit ({} units), found {} buffers", units.size(), weights.size());
  }
  place(units);
  allocate_moments();
  for (std::size_t u = 0; u < units.size(); ++u) upload_weights(static_cast<int>(u), weights[u]);
}

ResidentWeights::~ResidentWeights() = default;

void ResidentWeights::place(const std::vector<model::UnitLayout>& units) {
  backend::DeviceMemory& memory = backend_ != nullptr ? backend_->memory() : *host_memory_;
  for (const auto& unit : units) units_.push_back(std::make_unique<Unit>(memory, unit.numel));
}

void ResidentWeights::allocate_moments() {
  for (auto& unit : units_) {
    if (!unit->exp_avg_view.empty()) continue;
    unit->exp_avg_view = unit->exp_avg.get(unit->numel);  // zero-filled
    unit->exp_avg_sq_view = unit->exp_avg_sq.get(unit->numel);
  }
}

std::size_t ResidentWeights::index(int unit) const {
  ODC_CHECK(unit >= 0 && unit < num_units(), "unit {} outside [0, {})", unit, num_units());
  return static_cast<std::size_t>(unit);
}

bool ResidentWeights::on_host() const { return backend_ == nullptr || backend_->device().kind == DeviceKind::cpu; }

const float* ResidentWeights::acquire(int unit) { return static_cast<const float*>(at(unit).weight_view.data); }

float* ResidentWeights::grad_buffer(int unit) { return static_cast<float*>(at(unit).grad_view.data); }

void ResidentWeights::push_grad(int unit) { ++at(unit).pushes; }

std::span<float> ResidentWeights::host_span(float* data, int unit, const char* what) const {
  ODC_CHECK(on_host(), "resident weights: {}({}) asks for a host span of buffers in device memory; use download_{}",
            what, unit, what);
  return {data, static_cast<std::size_t>(at(unit).numel)};
}

std::span<float> ResidentWeights::weights(int unit) {
  return host_span(static_cast<float*>(at(unit).weight_view.data), unit, "weights");
}

std::span<const float> ResidentWeights::weights(int unit) const {
  return host_span(static_cast<float*>(at(unit).weight_view.data), unit, "weights");
}

std::span<float> ResidentWeights::gradients(int unit) {
  return host_span(static_cast<float*>(at(unit).grad_view.data), unit, "gradients");
}

std::span<const float> ResidentWeights::gradients(int unit) const {
  return host_span(static_cast<float*>(at(unit).grad_view.data), unit, "gradients");
}

std::vector<float> ResidentWeights::download_weights(int unit) const {
  std::vector<float> host(static_cast<std::size_t>(at(unit).numel));
  if (backend_ != nullptr) {
    backend_->download(at(unit).weight_view, host);
  } else {
    std::copy_n(static_cast<const float*>(at(unit).weight_view.data), host.size(), host.begin());
  }
  return host;
}

std::vector<float> ResidentWeights::download_gradients(int unit) const {
  std::vector<float> host(static_cast<std::size_t>(at(unit).numel));
  if (backend_ != nullptr) {
    backend_->download(at(unit).grad_view, host);
  } else {
    std::copy_n(static_cast<const float*>(at(unit).grad_view.data), host.size(), host.begin());
  }
  return host;
}

void ResidentWeights::upload_weights(int unit, std::span<const float> host) {
  Unit& target = at(unit);
  if (host.size() != static_cast<std::size_t>(target.numel)) {
    fail("resident weights: unit {} holds {} elements, the weights given for it have {}", unit, target.numel,
         host.size());
  }
  if (backend_ != nullptr) {
    backend_->copy(backend_->upload(host, *staging_), target.weight_view);
  } else {
    std::copy(host.begin(), host.end(), static_cast<float*>(target.weight_view.data));
  }
}

void ResidentWeights::zero_gradients() {
  for (auto& unit : units_) {
    if (backend_ != nullptr) {
      backend_->zero(unit->grad_view);
    } else {
      std::fill_n(static_cast<float*>(unit->grad_view.data), unit->numel, 0.0f);
    }
  }
}

void ResidentWeights::adamw_step(const kernels::AdamWParams& params) {
  allocate_moments();
  if (backend_ != nullptr) {
    std::vector<backend::AdamWSegment> segments;
    for (const auto& unit : units_) {
      segments.push_back({unit->weight_view, unit->grad_view, unit->exp_avg_view, unit->exp_avg_sq_view, true});
    }
    backend_->adamw_step(segments, params);
    return;
  }
  for (const auto& unit : units_) {
    kernels::cpu::adamw_step(static_cast<float*>(unit->weight_view.data), static_cast<const float*>(unit->grad_view.data),
                             static_cast<float*>(unit->exp_avg_view.data),
                             static_cast<float*>(unit->exp_avg_sq_view.data), unit->numel, params);
  }
}

std::int64_t ResidentWeights::pushes(int unit) const { return at(unit).pushes; }

}  // namespace odc::bench
