#pragma once
// ResidentWeights: the full fp32 weights of every unit, and their gradient buffers, held in host
// memory for as long as the object lives. It is the model's ParamSource and GradSink where nothing
// is sharded or fetched: benchmarks of the model alone, the parity dumps, small single-process
// runs. acquire() and grad_buffer() hand out host pointers, so it serves the CPU compute path
// only; a device backend needs a source whose buffers live in device memory.
#include <cstdint>
#include <span>
#include <vector>

#include "odc/model/llama_config.h"
#include "odc/model/param_io.h"
#include "odc/model/units.h"

namespace odc::model {

class ResidentWeights final : public ParamSource, public GradSink {
 public:
  // The weights a trainer of any world size starts from (init_unit_range with `seed`).
  ResidentWeights(const std::vector<UnitLayout>& units, const LlamaConfig& config, std::uint64_t seed);
  // Given weights (a loaded checkpoint): one buffer per unit, each of its layout's size.
  ResidentWeights(const std::vector<UnitLayout>& units, std::vector<std::vector<float>> weights);

  const float* acquire(int unit) override;
  void release(int) override {}  // the weights stay resident
  // The model adds into the buffer, which starts at zero and is zeroed again only by
  // zero_gradients(): gradients sum over microbatches until the caller zeroes them.
  float* grad_buffer(int unit) override;
  void push_grad(int unit) override;

  int num_units() const { return static_cast<int>(weights_.size()); }
  std::span<float> weights(int unit);
  std::span<const float> weights(int unit) const;
  std::span<float> gradients(int unit);
  std::span<const float> gradients(int unit) const;
  void zero_gradients();
  // push_grad(unit) calls since construction: how the parity dump checks that the model hands off
  // every unit's gradient once per microbatch.
  std::int64_t pushes(int unit) const;

 private:
  std::size_t index(int unit) const;

  std::vector<std::vector<float>> weights_;
  std::vector<std::vector<float>> gradients_;
  std::vector<std::int64_t> pushes_;
};

}  // namespace odc::model
