// Sharding layouts (train.sharding): names, hosts as blocks of ranks, the plan each rank derives
// (which group its shards span, how many replicas), the fall back to full on one host, and that a
// group without MPI refuses the sub-groups the layouts need.
#include <catch2/catch.hpp>

#include "odc/core/error.h"
#include "odc/distributed/group/in_process_group.h"
#include "odc/distributed/shard/sharding.h"
#include "unit/rank_threads.h"

using namespace odc;
using namespace odc::distributed;

TEST_CASE("sharding: names round-trip, unknown ones are refused", "[distributed][sharding]") {
  for (const auto s : {Sharding::full, Sharding::hybrid, Sharding::hpz}) CHECK(parse_sharding(sharding_name(s)) == s);
  CHECK_THROWS_WITH(parse_sharding("zero3"), Catch::Contains("unknown train.sharding 'zero3'"));
}

TEST_CASE("sharding: hosts as blocks of ranks", "[distributed][sharding]") {
  const Placement p = block_placement(5, 8, 4, "debug.ranks_per_host");
  CHECK(p.hosts == 2);
  CHECK(p.ranks_per_host == 4);
  CHECK(p.host == 1);
  CHECK(p.local_rank == 1);
  CHECK_THROWS_WITH(block_placement(0, 6, 4, "debug.ranks_per_host"),
                    Catch::Contains("debug.ranks_per_host = 4 does not divide the 6 ranks of the job into hosts"));
}

TEST_CASE("sharding: every rank's plan", "[distributed][sharding]") {
  // 2 hosts x 3 ranks: rank 4 is host 1's second rank.
  const Placement p = block_placement(4, 6, 3, "test");
  const ShardingPlan hybrid = plan_sharding(Sharding::hybrid, 4, 6, p);
  CHECK(hybrid.kind == Sharding::hybrid);
  CHECK(hybrid.shard_world == 3);
  CHECK(hybrid.shard_rank == 1);
  CHECK(hybrid.replicas == 2);
  CHECK(hybrid.replica == 1);
  CHECK(hybrid.describe() == "hybrid: 2 hosts x 3 ranks, shards over the 3 ranks of a host, 2 replicas");
  const ShardingPlan hpz = plan_sharding(Sharding::hpz, 4, 6, p);
  CHECK(hpz.kind == Sharding::hpz);
  CHECK(hpz.shard_world == 6);
  CHECK(hpz.shard_rank == 4);
  CHECK(hpz.replicas == 1);
  const ShardingPlan full = plan_sharding(Sharding::full, 4, 6, p);
  CHECK(full.shard_world == 6);
  CHECK(full.replica == 0);
  // One host: hybrid and hpz are full sharding, and the description says why.
  const ShardingPlan one = plan_sharding(Sharding::hybrid, 1, 4, Placement{1, 4, 0, 1});
  CHECK(one.kind == Sharding::full);
  CHECK(one.requested == Sharding::hybrid);
  CHECK(one.shard_world == 4);
  CHECK_THAT(one.describe(), Catch::Contains("train.sharding hybrid needs several hosts"));
}

TEST_CASE("sharding: a group without MPI is one host and cannot be split", "[distributed][sharding]") {
  std::vector<Placement> placements(2);
  std::vector<std::string> split_errors(2);
  const auto errors = test::on_every_rank(2, [&](HostGroup& g) {
    const auto r = static_cast<std::size_t>(g.rank());
    placements[r] = g.placement();
    try {
      g.split(g.rank(), "the sharding layout's host groups");
    } catch (const Error& e) {
      split_errors[r] = e.what();
    }
  });
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r);
    const auto i = static_cast<std::size_t>(r);
    CHECK(errors[i].empty());
    CHECK(placements[i].hosts == 1);
    CHECK(placements[i].ranks_per_host == 2);
    CHECK(placements[i].local_rank == r);
    CHECK_THAT(split_errors[i], Catch::Contains("the sharding layout's host groups: this group of 2 ranks runs without MPI"));
  }
}
