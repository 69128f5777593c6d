// make_plan on seeded, long-tailed random minibatches: every plan's structure, LocalSort's
// round-robin split, round_robin's greedy in-order packing, LB-Micro's equal counts, LB-Mini's token
// bound, and the constructed ordering lb_mini <= lb_micro <= local_sort of the largest per-rank
// cost; many sequences per rank (first-fit-decreasing fallback). The whole planner: test_planner.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/planner.h"
#include "unit/data/test_planner_support.h"

using odc::data::Balance;
using odc::data::CostModel;
using odc::data::Plan;
using odc::data::PlanInput;
using odc::data::RankPlan;
using namespace odc::test::planner;  // Rng, long_tailed, costs_of, part_cost, rank_items, require_valid_plan, ...

TEST_CASE("planner: make_plan properties on random long-tailed minibatches", "[planner]") {
  Rng rng{12345};
  const int instances = 1200;
  double micro_over_local = 0.0, mini_over_micro = 0.0;
  double bubble[3][2] = {};  // [local_sort, lb_micro, lb_mini][odc, collective]
  int compared = 0;
  for (int instance = 0; instance < instances; ++instance) {
    PlanInput input;
    input.world_size = std::vector<int>{1, 2, 3, 4, 8, 16}[static_cast<std::size_t>(rng.below(6))];
    const int per_rank = std::vector<int>{1, 2, 4, 8}[static_cast<std::size_t>(rng.below(4))];
    // A quarter of the minibatches do not divide over the ranks (lb_micro refuses those).
    const int extra = rng.below(4) == 0 ? 1 + rng.below(input.world_size) : 0;
    input.lengths = long_tailed(static_cast<std::size_t>(input.world_size * per_rank + extra), rng);
    input.token_cap =
        std::vector<std::int64_t>{4096, 6000, 16384}[static_cast<std::size_t>(rng.below(3))];
    switch (rng.below(3)) {
      case 0: input.cost = CostModel::linear(); break;
      case 1: input.cost = CostModel::quadratic(1.0 / 2048.0, 1.0); break;
      default: input.cost = CostModel::flops(6.0 * 1.2e8, 12.0 * 1024.0 * 16.0); break;
    }
    const bool divisible = input.lengths.size() % static_cast<std::size_t>(input.world_size) == 0;

    input.balance = Balance::local_sort;
    const Plan local = odc::data::make_plan(input);
    require_valid_plan(local, input);
    for (int r = 0; r < input.world_size; ++r) {
      const auto& rank = local.ranks[static_cast<std::size_t>(r)];
      std::vector<std::int64_t> expected;
      for (auto i = static_cast<std::size_t>(r); i < input.lengths.size();
           i += static_cast<std::size_t>(input.world_size)) {
        expected.push_back(static_cast<std::int64_t>(i));
      }
      REQUIRE(rank_items(rank) == expected);
      for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
        REQUIRE(rank.microbatches[m].size() == 1);
        if (m > 0) {
          REQUIRE(input.lengths[static_cast<std::size_t>(rank.microbatches[m - 1][0])] >=
                  input.lengths[static_cast<std::size_t>(rank.microbatches[m][0])]);
        }
      }
    }

    // round_robin: LocalSort's split, each rank's items packed in order, each microbatch closed
    // only when the next sequence would not fit; the rank's cost is the sum of its microbatches'.
    input.balance = Balance::round_robin;
    const Plan robin = odc::data::make_plan(input);
    const auto costs = costs_of(input.lengths, input.cost);
    for (std::size_t r = 0; r < robin.ranks.size(); ++r) {
      const auto& rank = robin.ranks[r];
      std::vector<std::int64_t> in_order;
      double sum = 0.0;
      for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
        const auto& mb = rank.microbatches[m];
        std::int64_t tokens = 0;
        for (auto i : mb) tokens += input.lengths[static_cast<std::size_t>(i)];
        REQUIRE(tokens <= input.token_cap);
        if (m + 1 < rank.microbatches.size()) {
          const auto next = rank.microbatches[m + 1].front();
          REQUIRE(tokens + input.lengths[static_cast<std::size_t>(next)] > input.token_cap);
        }
        REQUIRE(rank.microbatch_costs[m] == part_cost(costs, mb));
        sum += rank.microbatch_costs[m];
        in_order.insert(in_order.end(), mb.begin(), mb.end());
      }
      REQUIRE(in_order == rank_items(local.ranks[r]));
      REQUIRE(rank.cost == sum);
    }
    REQUIRE(robin.bubble_collective() >= robin.bubble_odc());

    input.balance = Balance::lb_mini;
    const Plan mini = odc::data::make_plan(input);
    require_valid_plan(mini, input);
    for (const auto& rank : mini.ranks) {
      std::int64_t tokens = 0;
      for (auto i : rank_items(rank)) tokens += input.lengths[static_cast<std::size_t>(i)];
      const auto lower = (tokens + input.token_cap - 1) / input.token_cap;
      REQUIRE(static_cast<std::int64_t>(rank.microbatches.size()) >= lower);
    }
    REQUIRE(mini.hash() == odc::data::make_plan(input).hash());

    if (!divisible) {
      input.balance = Balance::lb_micro;
      REQUIRE_THROWS_AS(odc::data::make_plan(input), odc::Error);
      continue;
    }
    input.balance = Balance::lb_micro;
    const Plan micro = odc::data::make_plan(input);
    require_valid_plan(micro, input);
    const auto count = micro.ranks[0].microbatches.size();
    for (const auto& rank : micro.ranks) {
      REQUIRE(rank.microbatches.size() == count);
      REQUIRE(rank_items(rank).size() ==
              input.lengths.size() / static_cast<std::size_t>(input.world_size));
    }

    // The constructed chain, exact (rank costs are canonical sums of the same sets).
    REQUIRE(max_rank_cost(micro) <= max_rank_cost(local));
    REQUIRE(max_rank_cost(mini) <= max_rank_cost(micro));
    micro_over_local += max_rank_cost(micro) / max_rank_cost(local);
    mini_over_micro += max_rank_cost(mini) / max_rank_cost(micro);
    const Plan* plans[3] = {&local, &micro, &mini};
    for (int p = 0; p < 3; ++p) {
      bubble[p][0] += plans[p]->bubble_odc();
      bubble[p][1] += plans[p]->bubble_collective();
    }
    ++compared;
  }
  REQUIRE(compared >= 800);
  std::cout << "[planner] " << compared
            << " random minibatches: mean max-rank-cost ratio lb_micro/local_sort "
            << micro_over_local / compared << ", lb_mini/lb_micro " << mini_over_micro / compared
            << "\n"
            << "[planner] mean bubble odc / collective: local_sort " << bubble[0][0] / compared
            << " / " << bubble[0][1] / compared << ", lb_micro " << bubble[1][0] / compared << " / "
            << bubble[1][1] / compared << ", lb_mini " << bubble[2][0] / compared << " / "
            << bubble[2][1] / compared << "\n";
}

TEST_CASE(
    "planner: many sequences per rank (first-fit-decreasing fallback, split to a common count)",
    "[planner]") {
  // LongAlign-like: 64K cap, quadratic cost, ~470 microbatches per rank, where cost-balanced KK
  // overfills some microbatch in tokens at every count tried near the lower bound, so first-fit
  // decreasing packs; for lb_micro the rank with fewer microbatches then has to split some.
  Rng rng{99};
  PlanInput input;
  input.world_size = 2;
  input.token_cap = 65536;
  input.cost = CostModel::quadratic(4.348357 / (32000.0 * 32000.0), 8.768377 / 32000.0);
  for (int i = 0; i < 4096; ++i) {
    const double drawn = std::exp(std::log(16384.0) - 0.5 + rng.normal());
    input.lengths.push_back(std::clamp<std::int64_t>(std::llround(drawn), 64, 65536));
  }
  for (auto balance : {Balance::lb_micro, Balance::lb_mini}) {
    input.balance = balance;
    const Plan plan = odc::data::make_plan(input);
    require_valid_plan(plan, input);
    if (balance == Balance::lb_micro) {
      REQUIRE(plan.ranks[0].microbatches.size() == plan.ranks[1].microbatches.size());
    }
  }
}
