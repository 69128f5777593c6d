// Microbatch counts: lb_micro brings every rank to the common count (splitting a rank that packs
// into fewer), lb_mini_equal takes lb_micro's split and leaves each rank at its own fewest count,
// checked by hand and on seeded random minibatches. The whole planner: test_planner.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
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

namespace {


// The fewest microbatches any packing of `items` under `cap` tokens can have: bins = 1, 2, ...
// tried in turn by depth-first placement (longest first, an empty bin tried once). Small sets only.
std::size_t fewest_bins(const std::vector<std::int64_t>& lengths, const std::vector<std::int64_t>& items,
                        std::int64_t cap) {
  std::vector<std::int64_t> sizes;
  for (auto i : items) sizes.push_back(lengths[static_cast<std::size_t>(i)]);
  std::sort(sizes.rbegin(), sizes.rend());
  for (std::size_t bins = 1;; ++bins) {
    std::vector<std::int64_t> used(bins, 0);
    std::function<bool(std::size_t)> place = [&](std::size_t k) {
      if (k == sizes.size()) return true;
      for (std::size_t b = 0; b < bins; ++b) {
        if (used[b] + sizes[k] > cap) continue;
        used[b] += sizes[k];
        if (place(k + 1)) return true;
        used[b] -= sizes[k];
        if (used[b] == 0) break;  // the other empty bins are the same
      }
      return false;
    };
    if (place(0)) return bins;
  }
}

// Cap 10, cost s^2 + s, 16 sequences over 2 ranks: one rank needs 6 microbatches, the other's 8
// sequences fit in 5.
PlanInput uneven_counts_input() {
  PlanInput input;
  input.lengths = {3, 7, 6, 4, 6, 7, 8, 4, 8, 7, 6, 3, 6, 1, 9, 10};
  input.world_size = 2;
  input.token_cap = 10;
  input.cost = CostModel::quadratic(1.0, 1.0);
  input.balance = Balance::lb_micro;
  return input;
}

}  // namespace

TEST_CASE("planner: lb_micro brings every rank to the common microbatch count", "[planner]") {
  // One rank needs 6 microbatches; the other packs into 5, and KK by cost into 6 overfills one in
  // tokens, so its 5 are split (a 2-way KK of the costliest) into 6.
  PlanInput input = uneven_counts_input();
  const Plan plan = odc::data::make_plan(input);
  require_valid_plan(plan, input);
  REQUIRE(plan.ranks[0].microbatches.size() == 6);
  REQUIRE(plan.ranks[1].microbatches.size() == 6);
}

TEST_CASE("planner: lb_mini_equal keeps each rank's own microbatch count where lb_micro pads",
          "[planner]") {
  // lb_micro's input above (cap 10, cost s^2 + s, 16 sequences over 2 ranks): lb_micro gives both
  // ranks 6 microbatches, although one rank's 8 sequences fit in 5. lb_mini_equal takes the same
  // split (the same 8 sequences per rank, the same costs) and leaves that rank at 5.
  PlanInput input = uneven_counts_input();
  const Plan micro = odc::data::make_plan(input);
  input.balance = Balance::lb_mini_equal;
  const Plan equal = odc::data::make_plan(input);
  require_valid_plan(equal, input);  // cap, partition of 0..15, costs, order
  REQUIRE(micro.ranks[0].microbatches.size() == 6);
  REQUIRE(micro.ranks[1].microbatches.size() == 6);
  std::vector<std::size_t> counts;
  for (std::size_t r = 0; r < 2; ++r) {
    const auto items = rank_items(equal.ranks[r]);
    REQUIRE(items.size() == 8);                          // n / D sequences on every rank
    REQUIRE(items == rank_items(micro.ranks[r]));        // lb_micro's split, rank by rank
    REQUIRE(equal.ranks[r].cost == micro.ranks[r].cost);  // bitwise: the same canonical sums
    // The rank's own count is the fewest microbatches its sequences can be packed into.
    REQUIRE(equal.ranks[r].microbatches.size() == fewest_bins(input.lengths, items, input.token_cap));
    counts.push_back(equal.ranks[r].microbatches.size());
  }
  std::sort(counts.begin(), counts.end());
  REQUIRE(counts == std::vector<std::size_t>{5, 6});  // lb_micro padded the 5 to 6
  REQUIRE(equal.max_microbatches() == micro.max_microbatches());
  REQUIRE(equal.makespan_odc() == micro.makespan_odc());  // same per-rank costs, same ODC makespan
  REQUIRE(equal.hash() != micro.hash());
}

TEST_CASE("planner: lb_mini_equal on random long-tailed minibatches", "[planner]") {
  // Every rank n / D sequences, the same sets (and costs) as lb_micro's; each rank's count is its
  // own minimal one: lb_micro's common count is their maximum, a rank already at it has lb_micro's
  // very microbatches, the others fewer; the token bound ceil(tokens / cap) holds; lb_mini's max
  // per-rank cost never exceeds it.
  Rng rng{4242};
  int fewer = 0;
  for (int instance = 0; instance < 600; ++instance) {
    PlanInput input;
    input.world_size = std::vector<int>{1, 2, 3, 4, 8, 16}[static_cast<std::size_t>(rng.below(6))];
    const int per_rank = std::vector<int>{1, 2, 4, 8, 16}[static_cast<std::size_t>(rng.below(5))];
    const auto n = static_cast<std::size_t>(input.world_size * per_rank);
    input.lengths = long_tailed(n, rng);
    input.token_cap = std::vector<std::int64_t>{4096, 6000, 16384}[static_cast<std::size_t>(rng.below(3))];
    input.cost = rng.below(2) == 0 ? CostModel::linear() : CostModel::quadratic(1.0 / 2048.0, 1.0);
    input.balance = Balance::lb_mini_equal;
    const Plan equal = odc::data::make_plan(input);
    require_valid_plan(equal, input);
    input.balance = Balance::lb_micro;
    const Plan micro = odc::data::make_plan(input);
    input.balance = Balance::lb_mini;
    const Plan mini = odc::data::make_plan(input);
    const auto common = micro.ranks[0].microbatches.size();
    std::size_t most = 0;
    for (std::size_t r = 0; r < equal.ranks.size(); ++r) {
      const auto& rank = equal.ranks[r];
      const auto items = rank_items(rank);
      REQUIRE(items.size() == static_cast<std::size_t>(per_rank));
      REQUIRE(items == rank_items(micro.ranks[r]));
      REQUIRE(rank.cost == micro.ranks[r].cost);
      std::int64_t tokens = 0;
      for (auto i : items) tokens += input.lengths[static_cast<std::size_t>(i)];
      REQUIRE(static_cast<std::int64_t>(rank.microbatches.size()) >= (tokens + input.token_cap - 1) / input.token_cap);
      REQUIRE(rank.microbatches.size() <= common);
      if (rank.microbatches.size() == common) {
        // The same count; lb_micro may then have moved sequences between the rank's microbatches
        // to fit the steps of its barrier schedule (align_to_steps), never across ranks.
        REQUIRE(rank.microbatches.size() == micro.ranks[r].microbatches.size());
      } else {
        ++fewer;
      }
      most = std::max(most, rank.microbatches.size());
    }
    REQUIRE(most == common);
    REQUIRE(max_rank_cost(equal) == max_rank_cost(micro));
    REQUIRE(max_rank_cost(mini) <= max_rank_cost(equal));
    input.balance = Balance::lb_mini_equal;
    REQUIRE(equal.hash() == odc::data::make_plan(input).hash());
  }
  std::cout << "[planner] lb_mini_equal: " << fewer
            << " rank plans over 600 random minibatches ran fewer microbatches than lb_micro's common count\n";
  REQUIRE(fewer >= 50);  // the padding lb_mini_equal avoids is common, not a corner case
}
