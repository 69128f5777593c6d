// Device-resident optimizer state, proven on the CPU: a ShardStore over a backend whose memory is
// tagged as a device (host memory underneath, so the test can run anywhere) keeps masters,
// gradients and moments in that memory, initializes them exactly as a host store does, and the
// optimizer step through Backend::adamw_step / sum_of_squares gives bit-for-bit the host store's
// results. Only the memory is faked; the math is the Backend defaults' (the host kernels).
#include <cmath>
#include <cstring>
#include <vector>

#include <catch2/catch.hpp>

#include "../tiny_model.h"
#include "odc/backend/backend.h"
#include "odc/core/error.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/model/units.h"
#include "odc/optim/sharded_adamw.h"

using namespace odc;
using backend::ConstView;
using backend::View;

namespace {

class TaggedMemory final : public backend::DeviceMemory {
 public:
  Device device() const override { return Device::cuda(3); }
  void* allocate(std::size_t bytes) override {
    blocks_.emplace_back(bytes, std::byte{0});
    return blocks_.back().data();
  }
  void deallocate(void*, std::size_t) noexcept override {}  // freed with the memory

 private:
  std::vector<std::vector<std::byte>> blocks_;
};

// Views tagged cuda:3 over host memory. The data movement and optimizer ops are real; the
// model's ops are never called here.
class TaggedBackend final : public backend::Backend {
 public:
  std::string_view name() const override { return "tagged"; }
  backend::DeviceMemory& memory() override { return memory_; }
  DType activation_dtype() const override { return DType::f32; }
  backend::PeakFlops measure_peak_flops() override { return {1.0, 1.0, "fake"}; }

  ConstView upload(std::span<const std::int32_t> host, backend::Buffer& staging) override {
    const View v = staging.get(static_cast<std::int64_t>(host.size()));
    std::memcpy(v.data, host.data(), host.size_bytes());
    return v;
  }
  ConstView upload(std::span<const float> host, backend::Buffer& staging) override {
    const View v = staging.get(static_cast<std::int64_t>(host.size()));
    std::memcpy(v.data, host.data(), host.size_bytes());
    return v;
  }
  void download(ConstView source, std::span<float> host) override {
    REQUIRE(source.device == Device::cuda(3));
    REQUIRE(static_cast<std::int64_t>(host.size()) == source.count);
    std::memcpy(host.data(), source.data, host.size_bytes());
  }
  void copy(ConstView source, View target) override {
    REQUIRE(source.count == target.count);
    std::memcpy(target.data, source.data, static_cast<std::size_t>(source.count) * dtype_size(source.dtype));
  }
  void add(ConstView, View) override { FAIL("add is not used by the optimizer"); }
  void zero(View target) override {
    REQUIRE(target.device == Device::cuda(3));
    std::memset(target.data, 0, static_cast<std::size_t>(target.count) * dtype_size(target.dtype));
  }
  // The defaults refuse device views; the tagged memory is host memory underneath.
  double sum_of_squares(ConstView x) override {
    REQUIRE(x.device == Device::cuda(3));
    ++reductions;
    return kernels::cpu::sum_of_squares(static_cast<const float*>(x.data), x.count);
  }
  void adamw_step(std::span<const backend::AdamWSegment> segments, const kernels::AdamWParams& params) override {
    std::vector<backend::AdamWSegment> host(segments.begin(), segments.end());
    for (auto& s : host) {
      REQUIRE(s.param.device == Device::cuda(3));
      s.param.device = s.grad.device = s.exp_avg.device = s.exp_avg_sq.device = Device::cpu();
    }
    ++optimizer_calls;
    Backend::adamw_step(host, params);
  }

#define ODC_UNUSED(...) \
  override { FAIL("a model op on the tagged backend"); }
  void gather_rows(ConstView, ConstView, std::int64_t, View) ODC_UNUSED()
  void scatter_rows(ConstView, ConstView, std::int64_t, View) ODC_UNUSED()
  void rmsnorm_forward(ConstView, ConstView, View, View, std::int64_t, std::int64_t, double) ODC_UNUSED()
  void rmsnorm_backward(ConstView, ConstView, ConstView, ConstView, View, View, std::int64_t, std::int64_t,
                        bool) ODC_UNUSED()
  void linear_forward(ConstView, ConstView, ConstView, View, std::int64_t, std::int64_t, std::int64_t) ODC_UNUSED()
  void linear_forward_add(ConstView, ConstView, View, std::int64_t, std::int64_t, std::int64_t) ODC_UNUSED()
  void linear_backward(ConstView, ConstView, ConstView, View, View, View, std::int64_t, std::int64_t, std::int64_t,
                       bool) ODC_UNUSED()
  void rope_tables(ConstView, std::int64_t, const std::vector<double>&, View, View) ODC_UNUSED()
  void rope_forward(View, ConstView, ConstView, std::int64_t, int, int) ODC_UNUSED()
  void rope_backward(View, ConstView, ConstView, std::int64_t, int, int) ODC_UNUSED()
  void attention_forward(const backend::AttentionShape&, ConstView, ConstView, ConstView, View, View) ODC_UNUSED()
  void attention_backward(const backend::AttentionShape&, ConstView, ConstView, ConstView, ConstView, ConstView,
                          ConstView, View, View, View) ODC_UNUSED()
  void attention_cached(const backend::CachedAttentionShape&, ConstView, ConstView, ConstView, View) ODC_UNUSED()
  void swiglu_forward(ConstView, View, std::int64_t, std::int64_t) ODC_UNUSED()
  void swiglu_backward(ConstView, ConstView, View, std::int64_t, std::int64_t) ODC_UNUSED()
  void embedding_forward(ConstView, ConstView, View, std::int64_t, std::int64_t) ODC_UNUSED()
  void embedding_backward(ConstView, ConstView, View, std::int64_t, std::int64_t) ODC_UNUSED()
  void cross_entropy(ConstView, ConstView, ConstView, std::int64_t, std::int64_t, View, View,
                     backend::LossSums&) ODC_UNUSED()
#undef ODC_UNUSED

  int reductions = 0;
  int optimizer_calls = 0;

 private:
  TaggedMemory memory_;
};

std::vector<float> all(std::span<const float> s) { return {s.begin(), s.end()}; }

// The same deterministic pseudo-gradient into both stores' accumulators.
void fill_grads(distributed::ShardStore& store, int step) {
  const auto n = static_cast<std::size_t>(store.layout().owned_elements());
  std::vector<float> g(n);
  for (std::size_t i = 0; i < n; ++i) g[i] = 0.01f * static_cast<float>(static_cast<int>((i * 7 + step * 3) % 13) - 6);
  std::memcpy(store.grad(0), g.data(), n * sizeof(float));  // both memories are host-addressable here
}

}  // namespace

TEST_CASE("a device shard store matches a host store bit for bit through init, AdamW and I/O", "[optim]") {
  const auto config = test::tiny_model(2);
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, 1, 0);
  TaggedBackend device;
  distributed::ShardStore host(layout, units, config, 11);
  distributed::ShardStore on_device(layout, units, config, 11, {}, &device);
  REQUIRE(host.device() == nullptr);
  REQUIRE(on_device.device() == &device);
  CHECK(on_device.masters_view().device == Device::cuda(3));
  CHECK(host.masters_view().device == Device::cpu());
  CHECK(on_device.bytes() == host.bytes());
  // The comm hands the model the store's own (device) memory.
  distributed::LocalComm comm(on_device);
  CHECK(comm.acquire(1) == on_device.master(1));
  CHECK(on_device.master_base() != on_device.host_masters().data());
  CHECK(host.master_base() == host.host_masters().data());

  // Initialization: the device masters are the host store's masters.
  std::vector<float> device_masters(static_cast<std::size_t>(layout.owned_elements()));
  std::memcpy(device_masters.data(), on_device.master_base(), device_masters.size() * sizeof(float));
  CHECK(device_masters == all(host.host_masters()));

  optim::AdamWConfig adam;
  adam.weight_decay = 0.1;
  optim::ShardedAdamW host_opt(adam), device_opt(adam);
  for (int step = 0; step < 3; ++step) {
    host.zero_grads();
    on_device.zero_grads();
    fill_grads(host, step);
    fill_grads(on_device, step);
    const double host_norm = host.grad_sum_of_squares();
    CHECK(on_device.grad_sum_of_squares() == host_norm);
    host_opt.step(host, 1e-2, optim::clip_coefficient(std::sqrt(host_norm), 0.5));
    device_opt.step(on_device, 1e-2, optim::clip_coefficient(std::sqrt(host_norm), 0.5));
  }
  CHECK(device.optimizer_calls == 3);
  CHECK(device.reductions == 3);
  on_device.pull_to_host();
  CHECK(all(on_device.host_masters()) == all(host.host_masters()));
  CHECK(all(on_device.host_exp_avg()) == all(host.host_exp_avg()));
  CHECK(all(on_device.host_exp_avg_sq()) == all(host.host_exp_avg_sq()));

  // A checkpoint load writes the host views and pushes them: the device state follows.
  on_device.host_masters()[5] = 42.0f;
  on_device.host_exp_avg_sq()[2] = 7.0f;
  on_device.push_to_device();
  CHECK(on_device.master_base()[5] == 42.0f);
  CHECK(on_device.exp_avg_sq(0)[2] == 7.0f);
  // A host store's pull/push are nothing: its host views are the state.
  host.host_masters()[5] = 43.0f;
  host.push_to_device();
  host.pull_to_host();
  CHECK(host.master(0)[5] == 43.0f);
}

TEST_CASE("a device shard store holds its masters in a caller's region of the device's memory", "[optim]") {
  // The IPC transport exports the masters' region to its peers before the store exists.
  const auto config = test::tiny_model(1);
  const auto units = model::build_unit_layouts(config);
  const distributed::ShardLayout layout(units, 1, 0);
  TaggedBackend device;
  backend::Buffer exported(device.memory(), DType::f32);
  const backend::View region = exported.get(layout.owned_elements());
  distributed::ShardStore on_device(layout, units, config, 1,
                                    std::span<float>(static_cast<float*>(region.data),
                                                     static_cast<std::size_t>(layout.owned_elements())),
                                    &device);
  const distributed::ShardStore host(layout, units, config, 1);
  CHECK(on_device.master_base() == region.data);
  std::vector<float> masters(static_cast<std::size_t>(layout.owned_elements()));
  std::memcpy(masters.data(), region.data, masters.size() * sizeof(float));
  CHECK(masters == std::vector<float>(host.master(0), host.master(0) + layout.owned_elements()));
  // A region smaller than the shards is refused.
  CHECK_THROWS_WITH(distributed::ShardStore(layout, units, config, 1,
                                            std::span<float>(static_cast<float*>(region.data), 3), &device),
                    Catch::Contains("master region of 3 floats"));
}
