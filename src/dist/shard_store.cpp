#include "odc/dist/shard_store.h"

#include "odc/kernels/adamw.h"

namespace odc::dist {

ShardStore::ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                       const model::LlamaConfig& config, std::uint64_t seed)
    : layout_(layout) {
  for (int u = 0; u < layout_.num_units(); ++u) {
    const std::int64_t n = layout_.unit(u).shard;
    masters_.emplace_back(Shape{n}, DType::f32);
    grads_.emplace_back(Shape{n}, DType::f32);
    exp_avg_.emplace_back(Shape{n}, DType::f32);
    exp_avg_sq_.emplace_back(Shape{n}, DType::f32);
    const std::int64_t begin = layout_.shard_begin(u, layout_.rank());
    model::init_unit_range(units.at(static_cast<std::size_t>(u)), config, seed, begin, begin + n, master(u));
  }
}

void ShardStore::zero_grads() {
  for (auto& g : grads_) g.zero();
}

double ShardStore::grad_sum_of_squares() const {
  double sum = 0.0;
  for (const auto& g : grads_) sum += kernels::cpu::sum_of_squares(g.data<float>(), g.numel());
  return sum;
}

std::int64_t ShardStore::bytes() const {
  std::int64_t n = 0;
  for (const auto* group : {&masters_, &grads_, &exp_avg_, &exp_avg_sq_}) {
    for (const auto& t : *group) n += static_cast<std::int64_t>(t.nbytes());
  }
  return n;
}

}  // namespace odc::dist
