#pragma once
// BackendWeights: every unit's fp32 weights and gradient accumulator resident in a backend's
// memory (host for the CPU backend, device for CUDA), as the model's ParamSource and GradSink:
// what the model-level GPU programs (gpu_model_parity, gpu_model_throughput) train with. It
// moves data only through the Backend interface, so the same program runs on every backend.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/backend/backend_factory.h"
#include "odc/core/error.h"
#include "odc/model/param_io.h"
#include "odc/model/units.h"

namespace odc::bench {

class BackendWeights final : public model::ParamSource, public model::GradSink {
 public:
  BackendWeights(backend::Backend& b, const std::vector<model::UnitLayout>& units,
                 const std::vector<std::vector<float>>& weights)
      : backend_(&b), staging_(b.memory(), DType::f32) {
    for (std::size_t u = 0; u < units.size(); ++u) {
      weights_.emplace_back(b.memory(), DType::f32);
      grads_.emplace_back(b.memory(), DType::f32);
      exp_avg_.emplace_back(b.memory(), DType::f32);
      exp_avg_sq_.emplace_back(b.memory(), DType::f32);
      numel_.push_back(units[u].numel);
      grads_.back().get(units[u].numel);  // zero-filled
      exp_avg_.back().get(units[u].numel);
      exp_avg_sq_.back().get(units[u].numel);
      set_weights(static_cast<int>(u), weights[u]);
    }
  }

  const float* acquire(int unit) override { return static_cast<const float*>(view(weights_, unit).data); }
  void release(int) override {}
  float* grad_buffer(int unit) override { return static_cast<float*>(view(grads_, unit).data); }
  void push_grad(int) override {}

  void set_weights(int unit, std::span<const float> host) {
    backend_->copy(backend_->upload(host, staging_), view(weights_, unit));
  }
  std::vector<float> weights(int unit) { return download(weights_, unit); }
  std::vector<float> gradients(int unit) { return download(grads_, unit); }
  // One AdamW step of every unit on the backend (its adamw_step: the device's kernel on a GPU),
  // weight decay on every element (these programs train without decay).
  void adamw_step(const kernels::AdamWParams& params) {
    std::vector<backend::AdamWSegment> segments;
    for (std::size_t u = 0; u < weights_.size(); ++u) {
      const int unit = static_cast<int>(u);
      segments.push_back({view(weights_, unit), view(grads_, unit), view(exp_avg_, unit), view(exp_avg_sq_, unit), true});
    }
    backend_->adamw_step(segments, params);
  }
  void zero_gradients() {
    for (std::size_t u = 0; u < grads_.size(); ++u) backend_->zero(view(grads_, static_cast<int>(u)));
  }

 private:
  backend::View view(std::vector<backend::Buffer>& buffers, int unit) {
    const auto u = static_cast<std::size_t>(unit);
    return buffers[u].get(numel_[u]);
  }
  std::vector<float> download(std::vector<backend::Buffer>& buffers, int unit) {
    std::vector<float> host(static_cast<std::size_t>(numel_[static_cast<std::size_t>(unit)]));
    backend_->download(view(buffers, unit), host);
    return host;
  }

  backend::Backend* backend_;
  backend::Buffer staging_;
  std::vector<backend::Buffer> weights_, grads_, exp_avg_, exp_avg_sq_;
  std::vector<std::int64_t> numel_;
};

// The CUDA backend, or nullptr with the reason in `why` when this build or machine has none.
inline std::unique_ptr<backend::Backend> try_cuda_backend(std::string& why) {
  if (!backend::cuda_backend_built()) {
    why = "this build has no CUDA backend";
    return nullptr;
  }
  try {
    return backend::make_backend("cuda", DType::bf16, 1);
  } catch (const Error& e) {
    why = e.what();
    return nullptr;
  }
}

}  // namespace odc::bench
