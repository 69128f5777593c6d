#include "odc/distributed/shard/shard_store.h"

#include "odc/core/error.h"
#include "odc/kernels/adamw.h"

namespace odc::distributed {

namespace {
std::span<float> span_of(Tensor& t) { return {t.data<float>(), static_cast<std::size_t>(t.numel())}; }
}  // namespace

void draw_owned_masters(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                        const model::LlamaConfig& config, std::uint64_t seed, std::span<float> masters) {
  ODC_CHECK(static_cast<std::int64_t>(masters.size()) >= layout.owned_elements(), "{} floats for {} owned masters",
            masters.size(), layout.owned_elements());
  for (int u = 0; u < layout.num_units(); ++u) {
    const std::int64_t begin = layout.shard_begin(u, layout.rank());
    model::init_unit_range(units.at(static_cast<std::size_t>(u)), config, seed, begin, begin + layout.unit(u).shard,
                           masters.data() + layout.owned_offset(u));
  }
}

ShardStore::ShardStore(const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                       const model::LlamaConfig& config, std::optional<std::uint64_t> seed,
                       std::span<float> master_region, backend::Backend* device, StoreContents contents)
    : layout_(layout), contents_(contents), masters_drawn_(seed.has_value()) {
  const std::int64_t total = layout_.owned_elements();
  if (device != nullptr && device->device().kind != DeviceKind::cpu) device_ = device;
  ODC_CHECK(device_ == nullptr || contents_ == StoreContents::all, "a weights-only store lives in host memory");
  if (device_ != nullptr) {
    ODC_CHECK(master_region.empty() || static_cast<std::int64_t>(master_region.size()) >= total,
              "master region of {} floats for {} owned", master_region.size(), total);
    // Initialization and all host I/O go through the staging copies; the state is device memory.
    staging_masters_ = Tensor(Shape{total}, DType::f32);
    staging_exp_avg_ = Tensor(Shape{total}, DType::f32);
    staging_exp_avg_sq_ = Tensor(Shape{total}, DType::f32);
    float** kinds[] = {&masters_, &grads_, &exp_avg_, &exp_avg_sq_};
    device_state_.reserve(4);
    for (float** kind : kinds) {
      if (kind == &masters_ && !master_region.empty()) {
        masters_ = master_region.data();  // device memory the caller exported to its peers
        continue;
      }
      device_state_.emplace_back(device_->memory(), DType::f32);
      *kind = static_cast<float*>(device_state_.back().get(total).data);  // zero-filled
    }
  } else if (master_region.empty()) {
    own_masters_ = Tensor(Shape{total}, DType::f32);
    masters_ = own_masters_.data<float>();
  } else {
    ODC_CHECK(static_cast<std::int64_t>(master_region.size()) >= total, "master region of {} floats for {} owned",
              master_region.size(), total);
    masters_ = master_region.data();
  }
  if (device_ == nullptr && contents_ == StoreContents::all) {
    host_grads_ = Tensor(Shape{total}, DType::f32);
    host_exp_avg_ = Tensor(Shape{total}, DType::f32);
    host_exp_avg_sq_ = Tensor(Shape{total}, DType::f32);
    grads_ = host_grads_.data<float>();
    exp_avg_ = host_exp_avg_.data<float>();
    exp_avg_sq_ = host_exp_avg_sq_.data<float>();
  }
  if (!seed) return;  // a load fills the masters (and pushes them to a device store)
  draw_owned_masters(layout_, units, config, *seed, host_masters());
  push_to_device();
}

backend::View ShardStore::view(float* data) const {
  return {data, DType::f32, device_ != nullptr ? device_->device() : Device::cpu(), layout_.owned_elements()};
}

std::span<float> ShardStore::host_masters() {
  if (device_ != nullptr) return span_of(staging_masters_);
  return {masters_, static_cast<std::size_t>(layout_.owned_elements())};
}
std::span<const float> ShardStore::host_masters() const { return const_cast<ShardStore*>(this)->host_masters(); }
std::span<float> ShardStore::host_exp_avg() {
  if (exp_avg_ == nullptr) return {};  // weights only
  return device_ != nullptr ? span_of(staging_exp_avg_) : span_of(host_exp_avg_);
}
std::span<float> ShardStore::host_exp_avg_sq() {
  if (exp_avg_sq_ == nullptr) return {};
  return device_ != nullptr ? span_of(staging_exp_avg_sq_) : span_of(host_exp_avg_sq_);
}

void ShardStore::pull_to_host() const {
  if (device_ == nullptr) return;
  device_->download(view(masters_), span_of(staging_masters_));
  device_->download(view(exp_avg_), span_of(staging_exp_avg_));
  device_->download(view(exp_avg_sq_), span_of(staging_exp_avg_sq_));
}

void ShardStore::push_to_device() {
  if (device_ == nullptr) return;
  backend::Buffer staging(device_->memory(), DType::f32);
  // One staging buffer, reused: each upload + copy is ordered on the backend before the next.
  device_->copy(device_->upload(std::span<const float>(host_masters()), staging), masters_view());
  device_->copy(device_->upload(std::span<const float>(host_exp_avg()), staging), exp_avg_view());
  device_->copy(device_->upload(std::span<const float>(host_exp_avg_sq()), staging), exp_avg_sq_view());
  device_->synchronize();  // the staging buffer goes when this returns
}

void ShardStore::zero_grads() {
  if (grads_ == nullptr) return;  // weights only
  if (device_ != nullptr) {
    device_->zero(grads_view());
  } else {
    host_grads_.zero();
  }
}

double ShardStore::grad_sum_of_squares() {
  if (grads_ == nullptr) return 0.0;  // weights only
  if (device_ != nullptr) return device_->sum_of_squares(grads_view());
  return kernels::cpu::sum_of_squares(grads_, layout_.owned_elements());
}

std::int64_t ShardStore::bytes() const {
  const std::int64_t kinds = contents_ == StoreContents::all ? 4 : 1;  // masters, gradients, two moments
  return layout_.owned_elements() * static_cast<std::int64_t>(sizeof(float)) * kinds;
}

}  // namespace odc::distributed
