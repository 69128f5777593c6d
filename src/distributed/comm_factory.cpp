#include "odc/distributed/comm_factory.h"

#include <algorithm>

#include "odc/core/error.h"
#include "odc/distributed/collective_comm.h"
#include "odc/distributed/local_comm.h"
#include "odc/distributed/mpi_host_group.h"
#include "odc/distributed/odc_comm.h"
#include "odc/distributed/ucx_transport.h"

namespace odc::distributed {

CommStack::~CommStack() {
  // The comm references the store and the transport; the store may live in the transport's memory.
  comm_.reset();
  store_.reset();
  transport_.reset();
}

std::unique_ptr<CommStack> make_comm(const CommOptions& options, HostGroup& group, const ShardLayout& layout,
                                     const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                                     std::uint64_t seed, backend::Backend* device) {
  if (layout.world_size() != group.size() || layout.rank() != group.rank()) {
    fail("shard layout is for rank {} of {}, but the group has rank {} of {}", layout.rank(), layout.world_size(),
         group.rank(), group.size());
  }
  std::unique_ptr<CommStack> stack(new CommStack());
  if (group.size() == 1) {
    stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, std::span<float>{}, device);
    stack->comm_ = std::make_unique<LocalComm>(*stack->store_);
    return stack;
  }
  if (device != nullptr && device->device().kind != DeviceKind::cpu) {
    fail("the {} comm over {} ranks moves host memory; state on a {} device supports one rank", comm_kind_name(options.kind),
         group.size(), device->name());
  }
  auto* mpi = dynamic_cast<MpiHostGroup*>(&group);
  if (mpi == nullptr) {
    fail("the {} comm runs over MPI: a multi-rank run needs an MPI host group (run under mpirun)",
         comm_kind_name(options.kind));
  }
  if (options.kind == CommKind::collective) {
    stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed);
    stack->comm_ = std::make_unique<CollectiveComm>(*stack->store_, mpi->comm(), mpi->watchdog());
    return stack;
  }
  TransportOptions transport = options.transport;
  for (int u = 0; u < layout.num_units(); ++u) transport.slot_floats = std::max(transport.slot_floats, layout.unit(u).shard);
  // The masters live in memory the transport registered, so peers can read them one-sidedly.
  stack->transport_ = std::make_unique<UcxTransport>(mpi->comm(), layout.owned_elements(), transport);
  stack->store_ = std::make_unique<ShardStore>(layout, units, config, seed, stack->transport_->exposed());
  stack->comm_ = std::make_unique<OdcComm>(*stack->store_, *stack->transport_, mpi->comm(), mpi->watchdog(),
                                            options.deterministic);
  return stack;
}

}  // namespace odc::distributed
