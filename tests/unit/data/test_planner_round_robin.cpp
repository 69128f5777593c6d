// round_robin plans on small hand-checked inputs: rank r takes items r, r+N, ... packed in order
// under the cap, microbatches stay in packing order, per-microbatch costs come from the cost model
// and a rank's cost is their sum; ranks may run different microbatch counts, which the collective
// makespan and bubble account for (a rank without an m-th microbatch adds nothing to barrier m).
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/planner.h"

namespace {

using odc::data::Balance;
using odc::data::CostModel;
using odc::data::Plan;
using odc::data::PlanInput;
using Parts = std::vector<std::vector<std::int64_t>>;

PlanInput round_robin_input(std::vector<std::int64_t> lengths, int world_size, std::int64_t cap,
                            CostModel cost) {
  PlanInput input;
  input.lengths = std::move(lengths);
  input.world_size = world_size;
  input.token_cap = cap;
  input.cost = std::move(cost);
  input.balance = Balance::round_robin;
  return input;
}

}  // namespace

TEST_CASE("planner round_robin: name round trip", "[planner]") {
  REQUIRE(odc::data::parse_balance("round_robin") == Balance::round_robin);
  REQUIRE(odc::data::balance_name(Balance::round_robin) == "round_robin");
  REQUIRE_THROWS_WITH(odc::data::parse_balance("round-robin"),
                      Catch::Contains("round-robin") && Catch::Contains("round_robin"));
}

TEST_CASE("planner round_robin: exact microbatches, costs and metrics", "[planner]") {
  // 12 sequences over 3 ranks, cap 10, cost s^2 + s (c(1) = 2, c(2) = 6, c(3) = 12, c(4) = 20,
  // c(5) = 30, c(6) = 42, c(7) = 56, c(8) = 72, c(9) = 90).
  //   rank 0: items 0 3 6 9, lengths 4 3 5 8 -> {0,3} (7 tokens) {6} (5+8 > 10) {9}
  //   rank 1: items 1 4 7 10, lengths 9 1 2 3 -> {1,4} (10 tokens) {7,10}
  //   rank 2: items 2 5 8 11, lengths 2 6 7 1 -> {2,5} {8,11}
  const PlanInput input = round_robin_input({4, 9, 2, 3, 1, 6, 5, 2, 7, 8, 3, 1}, 3, 10,
                                            CostModel::quadratic(1.0, 1.0));
  const Plan plan = odc::data::make_plan(input);
  REQUIRE(plan.ranks.size() == 3);
  REQUIRE(plan.ranks[0].microbatches == Parts{{0, 3}, {6}, {9}});
  REQUIRE(plan.ranks[1].microbatches == Parts{{1, 4}, {7, 10}});
  REQUIRE(plan.ranks[2].microbatches == Parts{{2, 5}, {8, 11}});
  // Packing order, not sorted by cost: rank 0's costliest microbatch runs last.
  REQUIRE(plan.ranks[0].microbatch_costs == std::vector<double>{32.0, 30.0, 72.0});
  REQUIRE(plan.ranks[1].microbatch_costs == std::vector<double>{92.0, 18.0});
  REQUIRE(plan.ranks[2].microbatch_costs == std::vector<double>{48.0, 58.0});
  REQUIRE(plan.ranks[0].cost == 134.0);
  REQUIRE(plan.ranks[1].cost == 110.0);
  REQUIRE(plan.ranks[2].cost == 106.0);

  // Unequal counts (3, 2, 2): the third barrier waits only for rank 0.
  REQUIRE(plan.max_microbatches() == 3);
  REQUIRE(plan.makespan_odc() == 134.0);
  REQUIRE(plan.makespan_collective() == 92.0 + 58.0 + 72.0);
  REQUIRE(plan.bubble_odc() == 1.0 - 350.0 / (3.0 * 134.0));
  REQUIRE(plan.bubble_collective() == 1.0 - 350.0 / (3.0 * 222.0));

  // The same ranks' items as LocalSort (the same round-robin split), packed differently.
  PlanInput local = input;
  local.balance = Balance::local_sort;
  const Plan sorted = odc::data::make_plan(local);
  for (std::size_t r = 0; r < 3; ++r) {
    REQUIRE(sorted.ranks[r].cost == plan.ranks[r].cost);
    REQUIRE(sorted.ranks[r].microbatches.size() == 4);
  }
  REQUIRE(sorted.hash() != plan.hash());
  REQUIRE(odc::data::make_plan(input).hash() == plan.hash());
}

TEST_CASE("planner round_robin: a rank's cost is the sum of its microbatch costs", "[planner]") {
  // Cost 0.1*s^2: fractional costs, summed per microbatch in index order, then over microbatches.
  const PlanInput input =
      round_robin_input({3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5}, 2, 9, CostModel::quadratic(0.1, 0.0));
  const Plan plan = odc::data::make_plan(input);
  //   rank 0: items 0 2 4 6 8 10, lengths 3 4 5 2 5 5 -> {0,2} {4,6} {8} {10}
  //   rank 1: items 1 3 5 7 9, lengths 1 1 9 6 3 -> {1,3} {5} {7,9}
  REQUIRE(plan.ranks[0].microbatches == Parts{{0, 2}, {4, 6}, {8}, {10}});
  REQUIRE(plan.ranks[1].microbatches == Parts{{1, 3}, {5}, {7, 9}});
  const CostModel& c = input.cost;
  const std::vector<double> rank0 = {c.cost(3) + c.cost(4), c.cost(5) + c.cost(2), c.cost(5),
                                     c.cost(5)};
  const std::vector<double> rank1 = {c.cost(1) + c.cost(1), c.cost(9), c.cost(6) + c.cost(3)};
  REQUIRE(plan.ranks[0].microbatch_costs == rank0);
  REQUIRE(plan.ranks[1].microbatch_costs == rank1);
  REQUIRE(plan.ranks[0].cost == ((rank0[0] + rank0[1]) + rank0[2]) + rank0[3]);
  REQUIRE(plan.ranks[1].cost == (rank1[0] + rank1[1]) + rank1[2]);
  REQUIRE(plan.ranks[0].cost == Approx(0.1 * (9 + 16 + 25 + 4 + 25 + 25)));
  REQUIRE(plan.ranks[1].cost == Approx(0.1 * (1 + 1 + 81 + 36 + 9)));
}

TEST_CASE("planner round_robin: more ranks than sequences, uneven counts, errors", "[planner]") {
  SECTION("idle ranks plan nothing and count as idle in the bubble") {
    const Plan plan =
        odc::data::make_plan(round_robin_input({300, 100, 200}, 5, 1000, CostModel::linear()));
    REQUIRE(plan.ranks.size() == 5);
    REQUIRE(plan.ranks[0].microbatches == Parts{{0}});
    REQUIRE(plan.ranks[2].microbatches == Parts{{2}});
    REQUIRE(plan.ranks[3].microbatches.empty());
    REQUIRE(plan.ranks[4].cost == 0.0);
    REQUIRE(plan.makespan_collective() == 300.0);
    REQUIRE(plan.bubble_odc() == 1.0 - 600.0 / (5 * 300.0));
  }
  SECTION("a minibatch that does not divide over the ranks is fine (unlike lb_micro)") {
    const Plan plan =
        odc::data::make_plan(round_robin_input({5, 5, 5, 5, 5}, 2, 10, CostModel::linear()));
    REQUIRE(plan.ranks[0].microbatches == Parts{{0, 2}, {4}});
    REQUIRE(plan.ranks[1].microbatches == Parts{{1, 3}});
    REQUIRE(plan.makespan_collective() == 10.0 + 5.0);
    REQUIRE(plan.bubble_collective() == 1.0 - 25.0 / (2 * 15.0));
  }
  SECTION("the planner's checks apply") {
    REQUIRE_THROWS_WITH(
        odc::data::make_plan(round_robin_input({100, 5000, 200}, 2, 4096, CostModel::linear())),
        Catch::Contains("5000") && Catch::Contains("4096"));
    REQUIRE_THROWS_WITH(odc::data::make_plan(round_robin_input({}, 2, 4096, CostModel::linear())),
                        Catch::Contains("empty"));
    REQUIRE_THROWS_AS(odc::data::make_plan(round_robin_input({100}, 0, 4096, CostModel::linear())),
                      odc::Error);
  }
}
