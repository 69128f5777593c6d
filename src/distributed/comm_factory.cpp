#include "odc/distributed/comm_factory.h"

#include <algorithm>

#include "odc/core/error.h"
#include "odc/distributed/collective_comm.h"
#include "odc/distributed/ipc_odc_comm.h"
#include "odc/distributed/layered_comm.h"
#include "odc/distributed/local_comm.h"
#include "odc/distributed/mpi_host_group.h"
#include "odc/distributed/odc_comm.h"
#include "odc/distributed/peer_memory.h"
#include "odc/distributed/shared_segment.h"
#include "odc/distributed/staged_comm.h"
#include "odc/distributed/ucx_transport.h"
#if defined(ODC_HAVE_CUDA)
#include "odc/distributed/cuda_peer_memory.h"
#include "odc/distributed/nccl_comm.h"
#endif

namespace odc::distributed {

CommStack::~CommStack() {
  // The comm references the store and the transport; the store may live in the transport's memory.
  comm_.reset();
  store_.reset();
  host_comm_.reset();
  host_store_.reset();
  transport_.reset();
  peer_memory_.reset();
  // A layered comm's parts, then the sub-groups they run on (the host's before the replicas').
  secondary_.reset();
  primary_.reset();
  while (!groups_.empty()) groups_.pop_back();
}

OdcTransport parse_odc_transport(std::string_view name) {
  if (name == "auto") return OdcTransport::automatic;
  if (name == "ucx") return OdcTransport::ucx;
  if (name == "ipc") return OdcTransport::ipc;
  fail("unknown comm.transport '{}': expected auto, ucx or ipc", name);
}

namespace {

std::unique_ptr<PeerMemory> make_peer_memory(HostGroup& group, backend::Backend* device) {
  if (device != nullptr) {
#if defined(ODC_HAVE_CUDA)
    return make_cuda_peer_memory(*device);
#else
    fail("the ipc transport for {} state needs a CUDA build", device->name());
#endif
  }
  std::string prefix = group.is_root() ? unique_segment_prefix() : std::string();
  group.broadcast(prefix, "the IPC transport's region names");
  return make_host_peer_memory(prefix, group.rank());
}

}  // namespace

void CommStack::stage(CommStack& stack, std::unique_ptr<ShardStore> host_store, std::unique_ptr<Comm> host_comm,
                      const ShardLayout& layout, const std::vector<model::UnitLayout>& units,
                      const model::LlamaConfig& config, std::uint64_t seed, backend::Backend* state_device,
                      backend::Backend* device) {
  ODC_CHECK(device != nullptr, "host staging needs the model's backend");
  stack.host_store_ = std::move(host_store);
  stack.host_comm_ = std::move(host_comm);
  // The device store starts from the same seed: both hold the same masters until the first step.
  stack.store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, state_device);
  stack.comm_ = std::make_unique<StagedComm>(*stack.host_comm_, *stack.host_store_, *stack.store_, *device);
}

std::unique_ptr<CommStack> make_comm(const CommOptions& options, HostGroup& group, const ShardLayout& layout,
                                     const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                                     std::uint64_t seed, backend::Backend* device) {
  if (layout.world_size() != group.size() || layout.rank() != group.rank()) {
    fail("shard layout is for rank {} of {}, but the group has rank {} of {}", layout.rank(), layout.world_size(),
         group.rank(), group.size());
  }
  std::unique_ptr<CommStack> stack(new CommStack());
  stack->shard_group_ = &group;
  if (group.size() == 1) {
    stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, device,
                                                 device != nullptr && device->device().kind != DeviceKind::cpu
                                                     ? StoreContents::all
                                                     : options.store_contents);
    stack->comm_ = std::make_unique<LocalComm>(*stack->store_);
    return stack;
  }
  // A device backend holds the state in its memory; a host backend (or none) leaves it on the host.
  backend::Backend* state_device = device != nullptr && device->device().kind != DeviceKind::cpu ? device : nullptr;
  auto* mpi = dynamic_cast<MpiHostGroup*>(&group);
  if (options.kind == CommKind::collective) {
    if (state_device != nullptr) {
#if defined(ODC_HAVE_CUDA)
      stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, state_device);
      stack->comm_ = std::make_unique<NcclComm>(*stack->store_, group, *state_device, options.gather_dtype,
                                                options.transport.timeout_s);
      return stack;
#else
      fail("the collective comm for {} state needs a CUDA build (NCCL)", state_device->name());
#endif
    }
    if (mpi == nullptr) {
      fail("the collective comm on host memory runs over MPI: launch the job with odc-run or mpirun (train.comm odc "
           "runs without MPI on one host)");
    }
    if (options.gather_dtype != GatherDtype::f32) {
      fail("comm.gather_dtype {} on host memory: the MPI collectives gather the fp32 masters (bf16 gathers are NCCL's "
           "and the ipc transport's)", gather_dtype_name(options.gather_dtype));
    }
    auto host_store = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, nullptr,
                                                   options.store_contents);
    auto host_comm = std::make_unique<CollectiveComm>(*host_store, mpi->comm(), mpi->watchdog());
    if (!options.host_staging) {
      stack->store_ = std::move(host_store);
      stack->comm_ = std::move(host_comm);
      return stack;
    }
    CommStack::stage(*stack, std::move(host_store), std::move(host_comm), layout, units, config, seed, nullptr, device);
    return stack;
  }
  // A group without MPI is one host by construction (odc-run --local, threads).
  const bool one_host = mpi == nullptr || mpi->topology().hosts == 1;
  OdcTransport transport_kind = options.odc_transport;
  if (transport_kind == OdcTransport::automatic) {
    transport_kind = (state_device != nullptr && one_host) || mpi == nullptr ? OdcTransport::ipc : OdcTransport::ucx;
  }
  if (transport_kind == OdcTransport::ipc) {
    stack->peer_memory_ = make_peer_memory(group, state_device);
    std::string handle;
    auto* masters = static_cast<float*>(stack->peer_memory_->export_region(
        static_cast<std::size_t>(layout.owned_elements()) * sizeof(float), "the master shards", handle));
    stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed,
                                                 std::span<float>(masters, static_cast<std::size_t>(layout.owned_elements())),
                                                 state_device, state_device != nullptr ? StoreContents::all : options.store_contents);
    IpcOptions ipc;
    ipc.gather_dtype = options.gather_dtype;
    ipc.deterministic = options.deterministic;
    ipc.chunk_floats = std::max<std::int64_t>(1, options.transport.chunk_bytes / static_cast<std::int64_t>(sizeof(float)));
    ipc.slots = options.transport.max_inflight;
    ipc.timeout_s = options.transport.timeout_s;
    stack->comm_ = std::make_unique<IpcOdcComm>(*stack->store_, group, *stack->peer_memory_, handle, ipc, state_device);
    return stack;
  }
  if (options.gather_dtype != GatherDtype::f32) {
    fail("comm.gather_dtype {} needs comm.transport ipc (the UCX transport gathers the fp32 masters)",
         gather_dtype_name(options.gather_dtype));
  }
  const bool staged = state_device != nullptr || options.host_staging;
  TransportOptions transport = options.transport;
  for (int u = 0; u < layout.num_units(); ++u) transport.slot_floats = std::max(transport.slot_floats, layout.unit(u).shard);
  // The masters live in memory the transport registered, so peers can read them one-sidedly.
  stack->transport_ = std::make_unique<UcxTransport>(group, layout.owned_elements(), transport);
  auto host_store = std::make_unique<ShardStore>(layout, units, config, seed, stack->transport_->exposed(), nullptr,
                                                   options.store_contents);
  auto host_comm = std::make_unique<OdcComm>(*host_store, *stack->transport_, group, options.deterministic);
  if (!staged) {
    stack->store_ = std::move(host_store);
    stack->comm_ = std::move(host_comm);
    return stack;
  }
  CommStack::stage(*stack, std::move(host_store), std::move(host_comm), layout, units, config, seed, state_device, device);
  return stack;
}

std::unique_ptr<CommStack> make_sharded_comm(const CommOptions& options, const ShardingPlan& plan, HostGroup& world,
                                             const std::vector<model::UnitLayout>& units,
                                             const model::LlamaConfig& config, std::uint64_t seed,
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
  stack->comm_ = std::make_unique<HpzComm>(stack->primary_->comm(), stack->primary_->store(), stack->secondary_->comm(),
                                           stack->secondary_->store());
  return stack;
}

}  // namespace odc::distributed
