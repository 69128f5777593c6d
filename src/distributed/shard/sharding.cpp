#include "odc/distributed/shard/sharding.h"

#include <fmt/format.h>

#include "odc/core/error.h"

namespace odc::distributed {

Sharding parse_sharding(std::string_view name) {
  if (name == "full") return Sharding::full;
  if (name == "hybrid") return Sharding::hybrid;
  if (name == "hpz") return Sharding::hpz;
  fail("unknown train.sharding '{}': expected full, hybrid or hpz", name);
}

std::string_view sharding_name(Sharding sharding) {
  switch (sharding) {
    case Sharding::full: return "full";
    case Sharding::hybrid: return "hybrid";
    case Sharding::hpz: return "hpz";
  }
  return "full";
}

ShardingPlan plan_sharding(Sharding kind, int rank, int world, const Placement& placement) {
  ODC_CHECK(placement.hosts * placement.ranks_per_host == world, "placement does not cover the world");
  ShardingPlan plan;
  plan.placement = placement;
  plan.kind = placement.hosts > 1 ? kind : Sharding::full;
  plan.requested = kind;
  if (plan.kind == Sharding::hybrid) {
    plan.shard_world = placement.ranks_per_host;
    plan.shard_rank = placement.local_rank;
    plan.replicas = placement.hosts;
    plan.replica = placement.host;
  } else {
    plan.shard_world = world;
    plan.shard_rank = rank;
  }
  return plan;
}

std::string ShardingPlan::describe() const {
  const Placement& p = placement;
  const std::string where = fmt::format("{} host{} x {} rank{}", p.hosts, p.hosts == 1 ? "" : "s", p.ranks_per_host,
                                        p.ranks_per_host == 1 ? "" : "s");
  switch (kind) {
    case Sharding::hybrid:
      return fmt::format("hybrid: {}, shards over the {} ranks of a host, {} replicas", where, shard_world, replicas);
    case Sharding::hpz:
      return fmt::format("hpz: {}, shards over all {} ranks, a secondary copy over the {} ranks of each host", where,
                         shard_world, p.ranks_per_host);
    case Sharding::full: break;
  }
  if (requested != Sharding::full) {
    return fmt::format("full: {} (train.sharding {} needs several hosts; on one host it is full sharding)", where,
                       sharding_name(requested));
  }
  return fmt::format("full: {}, shards over all {} ranks", where, shard_world);
}

}  // namespace odc::distributed
