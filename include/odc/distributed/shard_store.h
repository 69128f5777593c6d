#pragma once
// ShardStore: what this rank owns, per unit: the fp32 master shard, the fp32 gradient
// accumulator and the AdamW moments. Nothing of a unit outside this rank's shard lives here.
// Each kind is one contiguous buffer with the units back to back, so a transport can register
// the masters as a single region (ODC serves one-sided reads from it).
#include <cstdint>
#include <span>
#include <vector>

#include "odc/core/tensor.h"
#include "odc/distributed/shard_layout.h"
#include "odc/model/llama_config.h"

namespace odc::distributed {

class ShardStore {
 public:
  // Initializes the master shards deterministically (model::init_unit_range), so every world size
  // starts from the same model. `master_region`, when given, is caller-owned memory of
  // layout.owned_elements() floats that holds the masters (e.g. transport-registered memory); it
  // must outlive the store.
  ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
             const model::LlamaConfig& config, std::uint64_t seed, std::span<float> master_region = {});

  const ShardLayout& layout() const { return layout_; }
  float* master(int u) { return masters_ + offset(u); }
  const float* master(int u) const { return masters_ + offset(u); }
  float* grad(int u) { return grads_.data<float>() + offset(u); }
  float* exp_avg(int u) { return exp_avg_.data<float>() + offset(u); }
  float* exp_avg_sq(int u) { return exp_avg_sq_.data<float>() + offset(u); }
  std::int64_t shard_size(int u) const { return layout_.unit(u).shard; }
  // Offset of unit u's shard inside the contiguous buffers (the same on every rank).
  std::int64_t offset(int u) const { return layout_.owned_offset(u); }
  float* master_base() { return masters_; }

  void zero_grads();
  // Sum of squares of the owned gradient shards (this rank only).
  double grad_sum_of_squares() const;
  // Bytes of master + gradient + optimizer state held by this rank.
  std::int64_t bytes() const;

 private:
  ShardLayout layout_;
  Tensor own_masters_;  // used when no master_region is given
  float* masters_ = nullptr;
  Tensor grads_, exp_avg_, exp_avg_sq_;
};

}  // namespace odc::distributed
