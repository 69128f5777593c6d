#include "odc/distributed/shard_store.h"

#include "odc/core/error.h"
#include "odc/kernels/adamw.h"

namespace odc::distributed {

ShardStore::ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                       const model::LlamaConfig& config, std::uint64_t seed, std::span<float> master_region)
    : layout_(layout) {
  const std::int64_t total = layout_.owned_elements();
  if (master_region.empty()) {
    own_masters_ = Tensor(Shape{total}, DType::f32);
    masters_ = own_masters_.data<float>();
  } else {
    ODC_CHECK(static_cast<std::int64_t>(master_region.size()) >= total, "master region of {} floats for {} owned",
              master_region.size(), total);
    masters_ = master_region.data();
  }
  grads_ = Tensor(Shape{total}, DType::f32);
  exp_avg_ = Tensor(Shape{total}, DType::f32);
  exp_avg_sq_ = Tensor(Shape{total}, DType::f32);
  for (int u = 0; u < layout_.num_units(); ++u) {
    const std::int64_t begin = layout_.shard_begin(u, layout_.rank());
    model::init_unit_range(units.at(static_cast<std::size_t>(u)), config, seed, begin, begin + shard_size(u),
                           master(u));
  }
}

void ShardStore::zero_grads() { grads_.zero(); }

double ShardStore::grad_sum_of_squares() const {
  return kernels::cpu::sum_of_squares(grads_.data<float>(), grads_.numel());
}

std::int64_t ShardStore::bytes() const {
  return static_cast<std::int64_t>(grads_.nbytes()) * 4;  // masters, gradients, two moments
}

}  // namespace odc::distributed
