#pragma once
// make_comm: the sharded state of a run and the Comm over it, built in the order their lifetimes
// need — ODC's transport first (it owns the memory the master shards live in, so peers can read
// them one-sidedly), then the ShardStore (masters initialized, accumulators, optimizer moments),
// then the Comm — and torn down in reverse. Which comm: choose_comm (comm_choice.h), from the
// options and the facts of the group and the device; this file only builds what it says.
// GPU state with a host comm (odc over ucx: several hosts) goes through StagedComm, which copies
// between the device and the host comm's own host store.
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "odc/distributed/comm/comm.h"
#include "odc/distributed/comm/comm_choice.h"
#include "odc/distributed/comm/comm_options.h"
#include "odc/distributed/group/host_group.h"
#include "odc/distributed/shard/shard_store.h"
#include "odc/distributed/shard/sharding.h"
#include "odc/distributed/transport/transport_options.h"
#include "odc/model/llama_config.h"
#include "odc/model/units.h"

namespace odc::distributed {

// The hosts `group` spans: MPI's shared-memory domains; a group without MPI is one host.
int comm_hosts(const HostGroup& group);

// A run's comm and what it runs on. Each comm owns what it was built over (ODC: its transport or
// peer memory and the store living there; StagedComm: its inner comm), so the members below are
// destroyed in reverse order of declaration and nothing needs a hand-ordered teardown.
class CommStack {
 public:
  CommStack(const CommStack&) = delete;
  CommStack& operator=(const CommStack&) = delete;

  Comm& comm() { return *comm_; }
  const Comm& comm() const { return *comm_; }
  // The shards the optimizer steps and checkpoints hold (a layered comm's: its primary part's).
  ShardStore& store() { return *state_; }
  const ShardStore& store() const { return *state_; }
  // Bytes of parameter and optimizer state this rank holds: the store's, plus a layered comm's
  // secondary copy of the weights (hpz).
  std::int64_t state_bytes() const { return store().bytes() + (secondary_ ? secondary_->store().bytes() : 0); }
  // The group the store's shards are spread over: the checkpoints' and the export's exchanges of
  // shards run over it (hybrid: the host's ranks, whose shards every other host holds too).
  HostGroup& shard_group() { return *shard_group_; }

 private:
  friend std::unique_ptr<CommStack> make_comm(const CommOptions&, HostGroup&, const ShardLayout&,
                                               const std::vector<model::UnitLayout>&, const model::LlamaConfig&,
                                               std::optional<std::uint64_t>, backend::Backend*);
  friend std::unique_ptr<CommStack> make_sharded_comm(const CommOptions&, const ShardingPlan&, HostGroup&,
                                                       const std::vector<model::UnitLayout>&, const model::LlamaConfig&,
                                                       std::optional<std::uint64_t>, backend::Backend*);
  CommStack() = default;
  HostGroup* shard_group_ = nullptr;
  ShardStore* state_ = nullptr;
  std::vector<std::unique_ptr<HostGroup>> groups_;  // sub-groups of the layout (destroyed last)
  std::unique_ptr<CommStack> primary_;              // the layered comms' parts (layered_comm.h)
  std::unique_ptr<CommStack> secondary_;
  std::unique_ptr<ShardStore> store_;  // the state, where the comm does not own it (local, collectives, staged)
  std::unique_ptr<Comm> comm_;         // destroyed first
};

// Collective over `group`. The collective comm on host memory needs an MpiHostGroup (it runs on its
// communicator and watchdog); ODC runs over any group; a single rank needs no communicator. The masters are initialized
// deterministically from `seed` (ShardStore), the same for every world size; without a seed they
// are left for a checkpoint load to fill (every store of the stack: a staged comm's host copy and
// hpz's secondary copy are refreshed from the loaded masters at each minibatch start). `device`, when
// given and not a host backend, holds the state in its memory (then the comm is NCCL or IPC).
std::unique_ptr<CommStack> make_comm(const CommOptions& options, HostGroup& group, const ShardLayout& layout,
                                     const std::vector<model::UnitLayout>& units, const model::LlamaConfig& config,
                                     std::optional<std::uint64_t> seed, backend::Backend* device = nullptr);

// Collective over `world`: the comm of `plan` (plan_sharding). full: make_comm over `world`;
// hybrid: a comm over this rank's host (its sub-group) wrapped in a HybridComm; hpz: the world's
// comm and a host comm under an HpzComm. Layouts that need hosts need an MpiHostGroup.
std::unique_ptr<CommStack> make_sharded_comm(const CommOptions& options, const ShardingPlan& plan, HostGroup& world,
                                             const std::vector<model::UnitLayout>& units,
                                             const model::LlamaConfig& config, std::optional<std::uint64_t> seed,
                                             backend::Backend* device = nullptr);

}  // namespace odc::distributed
