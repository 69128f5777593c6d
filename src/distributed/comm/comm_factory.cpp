#include "odc/distributed/comm/comm_factory.h"

#include <algorithm>

#include "odc/core/error.h"
#include "odc/distributed/comm/collective_comm.h"
#include "odc/distributed/comm/comm_buffers.h"
#include "odc/distributed/comm/layered_comm.h"
#include "odc/distributed/comm/local_comm.h"
#include "odc/distributed/group/mpi_host_group.h"
#include "odc/distributed/comm/odc_comm.h"
#include "odc/distributed/transport/ipc/ipc_transport.h"
#include "odc/distributed/transport/ipc/peer_memory.h"
#include "odc/distributed/group/shared_segment.h"
#include "odc/distributed/comm/staged_comm.h"
#include "odc/distributed/transport/ucx/ucx_transport.h"
#if defined(ODC_HAVE_CUDA)
#include "odc/distributed/transport/ipc/cuda_peer_memory.h"
#include "odc/distributed/comm/nccl_comm.h"
#endif

namespace odc::distributed {

namespace {

std::unique_ptr<PeerMemory> make_peer_memory(HostGroup& group, backend::Backend* device) {
  if (device != nullptr) {
#if defined(ODC_HAVE_CUDA)
    return make_cuda_peer_memory(*device);
#else
    ODC_CHECK(false, "choose_comm gave the ipc transport for device state without CUDA");
#endif
  }
  std::string prefix = group.is_root() ? unique_segment_prefix() : std::string();
  group.broadcast(prefix, "the IPC transport's region names");
  return make_host_peer_memory(prefix, group.rank());
}

}  // namespace

int comm_hosts(const HostGroup& group) {
  const auto* mpi = dynamic_cast<const MpiHostGroup*>(&group);
  return mpi != nullptr ? mpi->topology().hosts : 1;
}

std::unique_ptr<CommStack> make_comm(const CommOptions& options, HostGroup& group, const ShardLayout& layout,
                                     const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                                     std::optional<std::uint64_t> seed, backend::Backend* device) {
  if (layout.world_size() != group.size() || layout.rank() != group.rank()) {
    fail("shard layout is for rank {} of {}, but the group has rank {} of {}", layout.rank(), layout.world_size(),
         group.rank(), group.size());
  }
  // A device backend holds the state in its memory; a host backend (or none) leaves it on the host.
  backend::Backend* state_device = device != nullptr && device->device().kind != DeviceKind::cpu ? device : nullptr;
  auto* mpi = dynamic_cast<MpiHostGroup*>(&group);
  const CommChoice choice = choose_comm(comm_facts(
      options, group.size(), state_device != nullptr ? std::string(state_device->name()) : std::string(),
      group.over_mpi(), comm_hosts(group)));

  std::unique_ptr<CommStack> stack(new CommStack());
  stack->shard_group_ = &group;
  // A host comm serving device state: the device store starts from the same seed (both hold the
  // same masters until the first step; without a seed the load fills the device store, whose
  // masters every minibatch start copies to the host store), and the staged comm owns the host comm.
  const auto stage = [&](std::unique_ptr<Comm> host_comm, ShardStore& host_store,
                         std::unique_ptr<ShardStore> owned_host_store) {
    ODC_CHECK(device != nullptr, "host staging needs the model's backend");
    stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, state_device);
    stack->state_ = stack->store_.get();
    stack->comm_ = std::make_unique<StagedComm>(std::move(host_comm), host_store, *stack->store_, *device,
                                                std::move(owned_host_store));
    return std::move(stack);
  };
  switch (choice.build) {
    case CommBuild::local:
      stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, device,
                                                   state_device != nullptr ? StoreContents::all : options.store_contents);
      stack->state_ = stack->store_.get();
      stack->comm_ = std::make_unique<LocalComm>(*stack->store_);
      return stack;
    case CommBuild::nccl_collective:
#if defined(ODC_HAVE_CUDA)
      stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, state_device);
      stack->state_ = stack->store_.get();
      stack->comm_ = std::make_unique<NcclComm>(*stack->store_, group, *state_device, options.gather_dtype,
                                                options.transport.timeout_s);
      return stack;
#else
      break;
#endif
    case CommBuild::mpi_collective: {
      auto host_store = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, nullptr,
                                                     options.store_contents);
      auto host_comm = std::make_unique<CollectiveComm>(*host_store, mpi->comm(), mpi->watchdog());
      if (choice.staged) {
        ShardStore& host = *host_store;
        return stage(std::move(host_comm), host, std::move(host_store));
      }
      stack->store_ = std::move(host_store);
      stack->state_ = stack->store_.get();
      stack->comm_ = std::move(host_comm);
      return stack;
    }
    case CommBuild::odc_ipc: {
      auto memory = make_peer_memory(group, state_device);
      IpcShape shape = ipc_shape(options, comm_shape(layout));  // the sizes the memory plan lists (comm_buffers.h)
      shape.masters = static_cast<float*>(memory->export_region(static_cast<std::size_t>(shape.owned) * sizeof(float),
                                                                "the master shards", shape.master_handle));
      auto store = std::make_unique<ShardStore>(
          layout, units, config, seed, std::span<float>(shape.masters, static_cast<std::size_t>(shape.owned)),
          state_device, state_device != nullptr ? StoreContents::all : options.store_contents);
      const TransportOptions transport_options = odc_transport_options(options, choice.build, shape.largest_shard);
      auto transport = std::make_unique<IpcTransport>(std::move(memory), group, shape, transport_options, state_device);
      auto comm = std::make_unique<OdcComm>(std::move(transport), std::move(store), group, options.deterministic,
                                            state_device);
      stack->state_ = &comm->store();
      stack->comm_ = std::move(comm);
      return stack;
    }
    case CommBuild::odc_ucx: {
      const TransportOptions transport_options =
          odc_transport_options(options, choice.build, comm_shape(layout).largest_shard);
      // The masters live in memory the transport registered, so peers can read them one-sidedly.
      auto transport = std::make_unique<UcxTransport>(group, layout.owned_elements(), transport_options);
      auto host_store = std::make_unique<ShardStore>(layout, units, config, seed, transport->exposed(), nullptr,
                                                     options.store_contents);
      auto comm = std::make_unique<OdcComm>(std::move(transport), std::move(host_store), group, options.deterministic);
      ShardStore& host = comm->store();
      if (choice.staged) return stage(std::move(comm), host, nullptr);
      stack->state_ = &host;
      stack->comm_ = std::move(comm);
      return stack;
    }
  }
  fail("comm '{}' is not built in this build", comm_build_name(choice.build));
}

std::unique_ptr<CommStack> make_sharded_comm(const CommOptions& options, const ShardingPlan& plan, HostGroup& world,
                                             const std::vector<model::UnitLayout>& units,
                                             const model::LlamaConfig& config, std::optional<std::uint64_t> seed,
                                             backend::Backend* device) {
  if (plan.kind == Sharding::full) {
    return make_comm(options, world, ShardLayout(units, world.size(), world.rank()), units, config, seed, device);
  }
  const Placement& p = plan.placement;
  std::unique_ptr<CommStack> stack(new CommStack());
  // Sub-groups: this rank's host, and (hybrid) the ranks holding the same shards on every host.
  stack->groups_.push_back(world.split(p.host, "the sharding layout's host groups"));
  HostGroup& host = *stack->groups_.back();
  ODC_CHECK(host.size() == p.ranks_per_host && host.rank() == p.local_rank, "host group does not match the placement");
  const ShardLayout host_layout(units, p.ranks_per_host, p.local_rank);
  if (plan.kind == Sharding::hybrid) {
    stack->groups_.push_back(world.split(p.local_rank, "the hybrid layout's replica groups"));
    auto* replicas = dynamic_cast<MpiHostGroup*>(stack->groups_.back().get());
    ODC_CHECK(replicas != nullptr, "the replica group of a hybrid layout runs over MPI");
    stack->primary_ = make_comm(options, host, host_layout, units, config, seed, device);
    stack->shard_group_ = &host;
    stack->state_ = &stack->primary_->store();
    stack->comm_ = std::make_unique<HybridComm>(stack->primary_->comm(), stack->primary_->store(), replicas->comm(),
                                                replicas->watchdog());
    return stack;  // store(): the host-level one, owned by primary_ (destroyed after comm_)
  }
  stack->primary_ = make_comm(options, world, ShardLayout(units, world.size(), world.rank()), units, config, seed, device);
  // The secondary copy only serves gathers: no gradients, no optimizer state.
  CommOptions secondary = options;
  secondary.store_contents = StoreContents::weights;
  stack->secondary_ = make_comm(secondary, host, host_layout, units, config, seed, device);
  stack->shard_group_ = &world;
  stack->state_ = &stack->primary_->store();
  stack->comm_ = std::make_unique<HpzComm>(stack->primary_->comm(), stack->primary_->store(), stack->secondary_->comm(),
                                           stack->secondary_->store());
  return stack;
}

}  // namespace odc::distributed
