#pragma once
// Sharding: how the parameters, gradients and optimizer state of a run are laid out over its ranks
// and hosts (train.sharding), and where this rank sits in that layout.
//
//   full    every unit sharded over all ranks (FSDP / ZeRO-3): gathers and pushes reach every host.
//   hybrid  sharded over the ranks of a host, replicated across hosts (HSDP): gathers and pushes
//           stay inside the host; once per minibatch the host shards' gradients are summed across
//           the replicas (the ranks with the same local index on every host), and every replica
//           takes the same optimizer step. Optimizer state: 1/ranks_per_host of the model per rank.
//   hpz     sharded over all ranks, as full, plus a secondary copy of the weights sharded inside
//           each host (ZeRO++'s hpZ): refreshed from the primary shards at every minibatch start,
//           it serves every gather of the minibatch from the host; gradients go to the primary
//           owners as in full. Optimizer state as full; weights cost 1/ranks_per_host more.
//
// Hosts come from where the ranks run (MPI's shared-memory split), or from
// debug.ranks_per_host (consecutive blocks of ranks, to exercise the layouts on one machine).
#include <string>
#include <string_view>

#include "odc/distributed/group/host_group.h"  // Placement

namespace odc::distributed {

enum class Sharding { full, hybrid, hpz };
Sharding parse_sharding(std::string_view name);  // "full" | "hybrid" | "hpz", else odc::Error
std::string_view sharding_name(Sharding sharding);

// The layout a run shards over: the group of ranks its ShardStore spans (hybrid: the host's
// ranks; else all), this rank's place in it, and how many replicas of that layout exist.
struct ShardingPlan {
  Sharding kind = Sharding::full;       // the layout in effect
  Sharding requested = Sharding::full;  // train.sharding
  Placement placement;
  int shard_world = 1;   // ranks one copy of the shards is spread over
  int shard_rank = 0;    // this rank's index among them
  int replicas = 1;      // copies of the shards (hybrid: the hosts)
  int replica = 0;       // which copy this rank holds (hybrid: its host)
  std::string describe() const;  // "hybrid: 2 hosts x 2 ranks, shards over the 2 ranks of a host"
};

// The plan of `rank` of `world` under `kind`. A layout that needs several hosts on a job with one
// falls back to full (said in `describe`), so a config runs unchanged on one machine.
ShardingPlan plan_sharding(Sharding kind, int rank, int world, const Placement& placement);

}  // namespace odc::distributed
