#pragma once
// ShardStore: what this rank owns, per unit: the fp32 master shard, the fp32 gradient
// accumulator and the AdamW moments. Nothing of a unit outside this rank's shard lives here.
#include <cstdint>
#include <vector>

#include "odc/core/tensor.h"
#include "odc/dist/shard_layout.h"
#include "odc/model/llama_config.h"

namespace odc::dist {

class ShardStore {
 public:
  // Initializes the master shards deterministically (model::init_unit_range), so every world size
  // starts from the same model.
  ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
             const model::LlamaConfig& config, std::uint64_t seed);

  const ShardLayout& layout() const { return layout_; }
  float* master(int u) { return masters_.at(static_cast<std::size_t>(u)).data<float>(); }
  const float* master(int u) const { return masters_.at(static_cast<std::size_t>(u)).data<float>(); }
  float* grad(int u) { return grads_.at(static_cast<std::size_t>(u)).data<float>(); }
  float* exp_avg(int u) { return exp_avg_.at(static_cast<std::size_t>(u)).data<float>(); }
  float* exp_avg_sq(int u) { return exp_avg_sq_.at(static_cast<std::size_t>(u)).data<float>(); }
  std::int64_t shard_size(int u) const { return layout_.unit(u).shard; }

  void zero_grads();
  // Sum of squares of the owned gradient shards (this rank only).
  double grad_sum_of_squares() const;
  // Bytes of master + gradient + optimizer state held by this rank.
  std::int64_t bytes() const;

 private:
  ShardLayout layout_;
  std::vector<Tensor> masters_, grads_, exp_avg_, exp_avg_sq_;
};

}  // namespace odc::dist
