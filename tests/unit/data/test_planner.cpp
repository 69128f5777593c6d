// The planner's contract: balance names, determinism (bitwise costs, a hash that sees a swap),
// errors, more ranks than sequences, and the bubble formulas' closed forms. Elsewhere:
// KK + refinement in test_planner_partition.cpp, make_plan's properties on random minibatches in
// test_planner_make_plan.cpp, lb_micro's and lb_mini_equal's microbatch counts in
// test_planner_microbatch_counts.cpp, cost models in test_planner_cost_model.cpp, round_robin on
// hand-checked inputs in test_planner_round_robin.cpp, collective groups in test_planner_groups.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
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

TEST_CASE("planner: balance names", "[planner]") {
  for (auto balance : {Balance::local_sort, Balance::lb_micro, Balance::lb_mini, Balance::round_robin,
                       Balance::lb_mini_equal}) {
    REQUIRE(odc::data::parse_balance(odc::data::balance_name(balance)) == balance);
  }
  REQUIRE(odc::data::balance_name(Balance::lb_mini_equal) == "lb_mini_equal");
  REQUIRE_THROWS_WITH(odc::data::parse_balance("lb_macro"),
                      Catch::Contains("lb_macro") && Catch::Contains("lb_mini"));
}

TEST_CASE("planner: deterministic", "[planner]") {
  Rng rng{5};
  PlanInput input;
  input.lengths = long_tailed(4096, rng);
  input.world_size = 64;
  input.token_cap = 8192;
  input.cost = CostModel::quadratic(1.0 / 2048.0, 1.0);
  for (auto balance : {Balance::local_sort, Balance::lb_micro, Balance::lb_mini, Balance::round_robin,
                       Balance::lb_mini_equal}) {
    input.balance = balance;
    const Plan first = odc::data::make_plan(input);
    const Plan second = odc::data::make_plan(input);
    REQUIRE(first.hash() == second.hash());
    for (std::size_t r = 0; r < first.ranks.size(); ++r) {
      REQUIRE(first.ranks[r].microbatches == second.ranks[r].microbatches);
      REQUIRE(first.ranks[r].cost == second.ranks[r].cost);  // bitwise
    }
  }
  input.balance = Balance::lb_mini;
  Plan changed = odc::data::make_plan(input);
  const auto original = changed.hash();
  std::swap(changed.ranks[0].microbatches[0][0], changed.ranks[1].microbatches[0][0]);
  REQUIRE(changed.hash() != original);
}

TEST_CASE("planner: errors", "[planner]") {
  PlanInput input;
  input.lengths = {100, 5000, 200};
  input.world_size = 2;
  input.token_cap = 4096;
  REQUIRE_THROWS_WITH(odc::data::make_plan(input),
                      Catch::Contains("5000") && Catch::Contains("4096"));
  input.lengths = {};
  REQUIRE_THROWS_WITH(odc::data::make_plan(input), Catch::Contains("empty"));
  input.lengths = {100, 200, 300};
  input.balance = Balance::lb_micro;
  REQUIRE_THROWS_WITH(odc::data::make_plan(input),
                      Catch::Contains("3 sequences") && Catch::Contains("2 ranks"));
  input.balance = Balance::lb_mini_equal;
  REQUIRE_THROWS_WITH(odc::data::make_plan(input),
                      Catch::Contains("planner: lb_mini_equal needs the global minibatch (3 sequences) to "
                                      "divide evenly over 2 ranks"));
  input.world_size = 3;  // 3 over 3 divides: one sequence per rank
  for (const auto& rank : odc::data::make_plan(input).ranks) REQUIRE(rank_items(rank).size() == 1);
  input.world_size = 2;
  input.balance = Balance::lb_mini;
  REQUIRE_NOTHROW(odc::data::make_plan(input));
  input.world_size = 0;
  REQUIRE_THROWS_AS(odc::data::make_plan(input), odc::Error);
  input.world_size = 2;
  input.token_cap = 0;
  REQUIRE_THROWS_AS(odc::data::make_plan(input), odc::Error);
  input.token_cap = 4096;
  input.lengths = {100, 0};
  REQUIRE_THROWS_AS(odc::data::make_plan(input), odc::Error);
}

TEST_CASE("planner: more ranks than sequences", "[planner]") {
  PlanInput input;
  input.lengths = {300, 100, 200};
  input.world_size = 5;
  input.token_cap = 1000;
  for (auto balance : {Balance::local_sort, Balance::lb_mini}) {
    input.balance = balance;
    const Plan plan = odc::data::make_plan(input);
    require_valid_plan(plan, input);
    REQUIRE(max_rank_cost(plan) == 300.0);  // one sequence per busy rank
    REQUIRE(plan.bubble_odc() == Approx(1.0 - 600.0 / (5 * 300.0)));
  }
}

TEST_CASE("planner: bubble closed forms", "[planner]") {
  // D ranks with M microbatches of cost c each.
  auto uniform_plan = [](int ranks, int microbatches, double c) {
    Plan plan;
    for (int r = 0; r < ranks; ++r) {
      RankPlan rank;
      for (int m = 0; m < microbatches; ++m) {
        rank.microbatches.push_back({r * microbatches + m});
        rank.microbatch_costs.push_back(c);
        rank.cost += c;
      }
      plan.ranks.push_back(rank);
    }
    return plan;
  };
  SECTION("equal work: no bubble") {
    const Plan plan = uniform_plan(8, 4, 2.5);
    REQUIRE(plan.bubble_odc() == 0.0);
    REQUIRE(plan.bubble_collective() == 0.0);
    REQUIRE(plan.max_microbatches() == 4);
    REQUIRE(Plan{}.bubble_odc() == 0.0);
    REQUIRE(Plan{}.bubble_collective() == 0.0);
  }
  SECTION("one straggling microbatch: x(D-1) / (D(M+x)) under both barrier models") {
    // One microbatch on one rank costs c(1+x): the minibatch barrier and the per-microbatch
    // barriers both wait c*x for it, so the two bubbles coincide.
    const int d = 8, m = 4;
    const double c = 2.0, x = 1.5;
    Plan plan = uniform_plan(d, m, c);
    plan.ranks[3].microbatch_costs[0] = c * (1 + x);
    plan.ranks[3].cost = c * (m + x);
    const double expected = x * (d - 1) / (d * (m + x));
    REQUIRE(plan.bubble_odc() == Approx(expected));
    REQUIRE(plan.bubble_collective() == Approx(expected));
  }
  SECTION("stragglers at different microbatches: the collective pays for each") {
    // Ranks 0 and 1 each have one slow microbatch (c(1+x)), at positions 0 and 1. ODC waits once
    // (max C = c(2+x)); collectives wait at both barriers (sum_m max = 2c(1+x)).
    const int d = 4;
    const double c = 1.0, x = 1.0;
    Plan plan = uniform_plan(d, 2, c);
    plan.ranks[0].microbatch_costs = {c * (1 + x), c};
    plan.ranks[1].microbatch_costs = {c, c * (1 + x)};
    plan.ranks[0].cost = plan.ranks[1].cost = c * (2 + x);
    const double total = c * (2 * d + 2 * x);
    REQUIRE(plan.bubble_odc() == Approx(1 - total / (d * c * (2 + x))));             // 1/6
    REQUIRE(plan.bubble_collective() == Approx(1 - total / (d * 2 * c * (1 + x))));  // 3/8
    // The makespans behind them, and the zero-overhead speedup of ODC over collectives here.
    REQUIRE(plan.makespan_odc() == Approx(c * (2 + x)));
    REQUIRE(plan.makespan_collective() == Approx(2 * c * (1 + x)));
    REQUIRE(plan.makespan_collective() / plan.makespan_odc() == Approx(4.0 / 3.0));
  }
  SECTION("a rank without an m-th microbatch contributes 0 to that barrier") {
    Plan plan;
    plan.ranks.push_back(RankPlan{{{0}, {1}}, 2.0, {1.0, 1.0}});
    plan.ranks.push_back(RankPlan{{{2}}, 2.0, {2.0}});
    REQUIRE(plan.bubble_odc() == 0.0);
    REQUIRE(plan.bubble_collective() == Approx(1.0 - 4.0 / (2 * 3.0)));
    REQUIRE(plan.max_microbatches() == 2);
  }
}

TEST_CASE("planner: a fixed cost per microbatch counts in the makespans and bubbles, and in LB-Mini's choice",
          "[planner]") {
  // Rank 0: two microbatches of 3 and 1; rank 1: one of 4. c = 0.5 per microbatch.
  Plan plan;
  plan.per_microbatch = 0.5;
  RankPlan a;
  a.microbatches = {{0}, {1}};
  a.microbatch_costs = {3.0, 1.0};
  a.cost = 4.0;
  RankPlan b;
  b.microbatches = {{2}};
  b.microbatch_costs = {4.0};
  b.cost = 4.0;
  plan.ranks = {a, b};
  CHECK(plan.makespan_odc() == 5.0);                    // 4 + 2 x 0.5 on rank 0
  CHECK(plan.makespan_collective() == (4.0 + 0.5) + (1.0 + 0.5));  // steps: max 4, then 1
  CHECK(plan.bubble_odc() == Approx(1.0 - (5.0 + 4.5) / (2 * 5.0)));
  CHECK(plan.bubble_collective() == Approx(1.0 - (5.0 + 4.5) / (2 * 6.0)));
  // make_plan carries the cost model's c into the plan, and with it LB-Mini never plans a slower
  // ODC makespan than without weighing it (the same seeded minibatches).
  for (std::uint64_t seed = 1; seed <= 30; ++seed) {
    odc::data::PlanInput input;
    input.world_size = 4;
    input.token_cap = 4096;
    std::uint64_t state = seed;
    for (int i = 0; i < 24; ++i) {
      state = state * 6364136223846793005ULL + 1442695040888963407ULL;
      input.lengths.push_back(64 + static_cast<std::int64_t>((state >> 33) % 4000));
    }
    input.cost = odc::data::CostModel::quadratic(1e-4, 1.0);
    input.balance = Balance::lb_mini;
    const Plan blind = odc::data::make_plan(input);  // c = 0: the split chosen by cost alone
    input.cost.per_microbatch = 2000.0;              // about two sequences' worth per microbatch
    const Plan weighed = odc::data::make_plan(input);
    require_valid_plan(weighed, input);
    CHECK(weighed.per_microbatch == 2000.0);
    Plan blind_with_c = blind;
    blind_with_c.per_microbatch = 2000.0;
    CHECK(weighed.makespan_odc() <= blind_with_c.makespan_odc());
  }
}
