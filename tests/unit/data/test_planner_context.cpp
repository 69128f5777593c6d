// Context parallelism in the planner (odc/data/context_groups.h, PlanInput::context_dynamic and
// ::context_degree): the share of a split sequence and its cost, the group's degree (the smallest
// that fits, larger where the makespan shrinks), its members (least loaded first), the makespan by
// the schedule, the error texts, the static degree, and plans without split sequences unchanged.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/context_groups.h"
#include "odc/data/planner.h"
#include "unit/data/test_planner_support.h"

using odc::data::Balance;
using odc::data::ContextGroup;
using odc::data::CostModel;
using odc::data::Plan;
using odc::data::PlanInput;
using odc::data::RankPlan;
using namespace odc::test::planner;  // Rng, long_tailed, ...

namespace {

std::string error_of(const PlanInput& input) {
  try {
    (void)odc::data::make_plan(input);
  } catch (const odc::Error& e) {
    return e.what();
  }
  return "";
}

// Every sequence once: in a group, or in exactly one microbatch of one rank, never both; own
// microbatches within the cap; each rank's cost = its microbatches' + its groups' shares.
void require_valid_groups(const Plan& plan, const PlanInput& input) {
  std::vector<int> seen(input.lengths.size(), 0);
  for (const auto& group : plan.groups) {
    ++seen[static_cast<std::size_t>(group.sequence)];
    REQUIRE(input.lengths[static_cast<std::size_t>(group.sequence)] > input.token_cap);
    REQUIRE(odc::data::context_max_rows(input.lengths[static_cast<std::size_t>(group.sequence)],
                                        static_cast<int>(group.ranks.size())) <= input.token_cap);
  }
  for (std::size_t r = 0; r < plan.ranks.size(); ++r) {
    const RankPlan& rank = plan.ranks[r];
    double cost = 0.0;
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      std::int64_t tokens = 0;
      for (const auto i : rank.microbatches[m]) {
        ++seen[static_cast<std::size_t>(i)];
        tokens += input.lengths[static_cast<std::size_t>(i)];
      }
      REQUIRE(tokens <= input.token_cap);
      cost += rank.microbatch_costs[m];
    }
    for (const int g : rank.groups) {
      const auto& members = plan.groups[static_cast<std::size_t>(g)].ranks;
      REQUIRE(std::find(members.begin(), members.end(), static_cast<int>(r)) != members.end());
      cost += plan.groups[static_cast<std::size_t>(g)].cost;
    }
    REQUIRE(rank.cost == Approx(cost).epsilon(1e-12));
  }
  for (const int count : seen) REQUIRE(count == 1);
}

}  // namespace

TEST_CASE("context groups: a share's rows, pairs and cost", "[planner][context]") {
  // 100 tokens over 3: 6 chunks 17,17,17,17,16,16; member 0 holds chunks 0 and 5 (33 rows).
  REQUIRE(odc::data::context_max_rows(100, 3) == 33);
  REQUIRE(odc::data::context_rows(100, 3, 1) == 33);  // chunks 1 and 4: 17 + 16
  REQUIRE(odc::data::context_rows(100, 3, 2) == 34);  // chunks 2 and 3: 17 + 17
  // Chunk [b, e) of r rows: r*b + r(r+1)/2 pairs; member 0: [0,17) and [84,100).
  REQUIRE(odc::data::context_share_pairs(100, 3, 0) == 17.0 * 18.0 / 2.0 + 16.0 * 84.0 + 16.0 * 17.0 / 2.0);
  const CostModel quadratic = CostModel::quadratic(0.01, 2.0);
  for (const int k : {1, 2, 3, 5}) {
    double pairs = 0.0, shares = 0.0;
    for (int m = 0; m < k; ++m) {
      pairs += odc::data::context_share_pairs(1001, k, m);
      shares += odc::data::context_share_cost(quadratic, 1001, k, m);
    }
    REQUIRE(pairs == 1001.0 * 1002.0 / 2.0);
    REQUIRE(shares == Approx(quadratic.cost(1001)).epsilon(1e-12));  // the shares sum to the whole
  }
  // The exchange: exchange_per_token * L * (k-1)/k per member.
  CostModel with_exchange = quadratic;
  with_exchange.exchange_per_token = 0.5;
  REQUIRE(odc::data::context_share_cost(with_exchange, 1000, 4, 2) ==
          Approx(odc::data::context_share_cost(quadratic, 1000, 4, 2) + 0.5 * 1000 * 3 / 4).epsilon(1e-12));
  // The group costs its largest member's share.
  double worst = 0.0;
  for (int m = 0; m < 3; ++m) worst = std::max(worst, odc::data::context_share_cost(quadratic, 100, 3, m));
  REQUIRE(odc::data::context_group_cost(quadratic, 100, 3) == worst);
  // Measured: the shares sum to the whole too (the attention share split by pairs, the rest by rows).
  const CostModel measured = CostModel::measured({64, 1024, 4096}, {0.064, 1.5, 9.0});
  double measured_shares = 0.0;
  for (int m = 0; m < 4; ++m) measured_shares += odc::data::context_share_cost(measured, 5000, 4, m);
  REQUIRE(measured_shares == Approx(measured.cost(5000)).epsilon(1e-12));
  REQUIRE(odc::data::smallest_context_degree(100, 40) == 3);
  REQUIRE(odc::data::smallest_context_degree(100, 100) == 1);
  // 5 over 3: chunks 1,1,1,1,1,0, member 0 holds chunks 0 and 5: one row.
  REQUIRE(odc::data::smallest_context_degree(5, 1) == 3);
}

TEST_CASE("context groups: the smallest degree that fits, larger where the makespan shrinks", "[planner][context]") {
  PlanInput input;
  input.world_size = 4;
  input.token_cap = 40;
  input.cost = CostModel::linear();
  input.context_dynamic = true;
  input.lengths = {100, 30, 30, 30, 30, 30, 30, 30, 30};
  SECTION("the smallest k: its share (33 rows) fits the cap, k = 2's (50) does not") {
    input.max_context_degree = 3;
    const Plan plan = odc::data::make_plan(input);
    REQUIRE(plan.groups.size() == 1);
    REQUIRE(plan.groups[0].sequence == 0);
    REQUIRE(plan.groups[0].ranks.size() == 3);
    REQUIRE(plan.groups[0].cost == 34.0);  // linear: the largest member's rows (member 2: 17 + 17)
    require_valid_groups(plan, input);
  }
  SECTION("alone in its minibatch it takes the whole world: 25 rows each instead of 34 on three") {
    input.lengths = {100};
    const Plan plan = odc::data::make_plan(input);
    REQUIRE(plan.groups.size() == 1);
    REQUIRE(plan.groups[0].ranks == std::vector<int>{0, 1, 2, 3});
    REQUIRE(plan.makespan_odc() == 25.0);  // 8 chunks 13,13,13,13,12,12,12,12: 25 rows each
    require_valid_groups(plan, input);
  }
}

TEST_CASE("context groups: members are the least loaded ranks, longest sequence first", "[planner][context]") {
  PlanInput input;
  input.world_size = 4;
  input.token_cap = 60;
  input.cost = CostModel::linear();
  input.context_dynamic = true;
  input.max_context_degree = 2;
  input.lengths = {80, 100, 90, 10, 10};
  const Plan plan = odc::data::make_plan(input);
  REQUIRE(plan.groups.size() == 3);
  // 100 first on ranks 0, 1 (all idle: the lower ranks); 90 on 2, 3; 80 on the lighter pair (2, 3:
  // 45 < 50).
  REQUIRE(plan.groups[0].sequence == 1);
  REQUIRE(plan.groups[0].ranks == std::vector<int>{0, 1});
  REQUIRE(plan.groups[1].sequence == 2);
  REQUIRE(plan.groups[1].ranks == std::vector<int>{2, 3});
  REQUIRE(plan.groups[2].sequence == 0);
  REQUIRE(plan.groups[2].ranks == std::vector<int>{2, 3});
  REQUIRE(plan.ranks[2].groups == std::vector<int>{1, 2});
  // The short ones go around the loads: ranks 0 and 1 (50 each) take them, not 2 and 3 (85).
  REQUIRE(plan.ranks[0].microbatches.size() + plan.ranks[1].microbatches.size() == 2);
  REQUIRE(plan.ranks[2].microbatches.empty());
  REQUIRE(plan.ranks[3].microbatches.empty());
  require_valid_groups(plan, input);
  REQUIRE(plan.max_microbatches() == 2);  // ranks 2, 3: two groups
}

TEST_CASE("context groups: the ODC makespan follows the schedule", "[planner][context]") {
  // g0 on ranks 0, 1 (cost 5), then g1 on ranks 1, 2 (cost 3): g1 starts when rank 1 is ready (5).
  Plan plan;
  plan.per_microbatch = 0.5;
  plan.groups = {ContextGroup{7, {0, 1}, 5.0}, ContextGroup{8, {1, 2}, 3.0}};
  plan.ranks.push_back(RankPlan{{{0}}, 6.0, {1.0}, {0}});
  plan.ranks.push_back(RankPlan{{}, 8.0, {}, {0, 1}});
  plan.ranks.push_back(RankPlan{{{1}, {2}}, 7.0, {2.0, 2.0}, {1}});
  // Rank 0: 5.5 + 1.5 = 7; rank 1: 5.5, then g1 at 5.5 to 9; rank 2: g1 to 9, then 2 x 2.5 = 14.
  REQUIRE(plan.makespan_odc() == 14.0);
  REQUIRE(plan.busy(plan.ranks[2]) == 7.0 + 3 * 0.5);  // its group is one microbatch
  const double total = (6.0 + 1.0) + (8.0 + 1.0) + (7.0 + 1.5);
  REQUIRE(plan.bubble_odc() == Approx(1.0 - total / (3 * 14.0)).epsilon(1e-12));
  REQUIRE(plan.max_microbatches() == 3);
  // The collective: the groups as barrier steps (5.5 + 3.5), then its steps (2.5 + 2.5).
  REQUIRE(plan.makespan_collective() == 14.0);
}

TEST_CASE("context groups: without a sequence over the cap the plan is unchanged", "[planner][context]") {
  Rng rng{77};
  for (int instance = 0; instance < 60; ++instance) {
    PlanInput input;
    input.world_size = 1 + rng.below(8);
    input.lengths = long_tailed(static_cast<std::size_t>(input.world_size * (1 + rng.below(4))), rng);
    input.token_cap = 4096;
    input.cost = CostModel::quadratic(1e-4, 1.0);
    input.balance = std::vector<Balance>{Balance::lb_mini, Balance::local_sort,
                                         Balance::round_robin}[static_cast<std::size_t>(rng.below(3))];
    const Plan off = odc::data::make_plan(input);
    input.context_dynamic = true;
    const Plan on = odc::data::make_plan(input);
    REQUIRE(on.groups.empty());
    REQUIRE(on.hash() == off.hash());
    REQUIRE(on.makespan_odc() == off.makespan_odc());  // bit for bit
    for (std::size_t r = 0; r < on.ranks.size(); ++r) REQUIRE(on.ranks[r].cost == off.ranks[r].cost);
  }
}

TEST_CASE("context groups: random minibatches with long sequences", "[planner][context]") {
  Rng rng{2024};
  for (int instance = 0; instance < 200; ++instance) {
    PlanInput input;
    input.world_size = std::vector<int>{2, 4, 8}[static_cast<std::size_t>(rng.below(3))];
    input.lengths = long_tailed(static_cast<std::size_t>(input.world_size * (1 + rng.below(4))), rng);
    input.token_cap = 2048;  // the 4096 clip needs 2 ranks
    input.cost = CostModel::quadratic(1e-4, 1.0);
    input.cost.per_microbatch = rng.below(2) * 20.0;
    input.cost.exchange_per_token = rng.below(2) * 0.05;
    input.balance = std::vector<Balance>{Balance::lb_mini, Balance::local_sort,
                                         Balance::round_robin}[static_cast<std::size_t>(rng.below(3))];
    input.context_dynamic = true;
    const Plan plan = odc::data::make_plan(input);
    require_valid_groups(plan, input);
    // Groups at least as large as needed, members distinct.
    for (const auto& group : plan.groups) {
      auto ranks = group.ranks;
      std::sort(ranks.begin(), ranks.end());
      REQUIRE(std::adjacent_find(ranks.begin(), ranks.end()) == ranks.end());
      REQUIRE(static_cast<int>(ranks.size()) >=
              odc::data::smallest_context_degree(input.lengths[static_cast<std::size_t>(group.sequence)], input.token_cap));
    }
    // The schedule's makespan is never below the busiest rank.
    double busiest = 0.0;
    for (const auto& rank : plan.ranks) busiest = std::max(busiest, plan.busy(rank));
    REQUIRE(plan.makespan_odc() >= busiest);
    REQUIRE(plan.hash() == odc::data::make_plan(input).hash());  // deterministic
  }
}

TEST_CASE("context groups: error texts", "[planner][context]") {
  PlanInput input;
  input.world_size = 2;
  input.token_cap = 40;
  input.cost = CostModel::linear();
  input.lengths = {100, 10};
  // Off: today's error, and the switch named.
  std::string e = error_of(input);
  REQUIRE(e.find("sequence 0 of the minibatch has length 100, longer than the token cap "
                 "data.max_tokens_per_microbatch = 40") != std::string::npos);
  REQUIRE(e.find("train.context_parallel") != std::string::npos);
  // On, but two ranks are too few: index, length, cap and the group it needs.
  input.context_dynamic = true;
  e = error_of(input);
  REQUIRE(e.find("sequence 0 of the minibatch has length 100") != std::string::npos);
  REQUIRE(e.find("data.max_tokens_per_microbatch = 40") != std::string::npos);
  REQUIRE(e.find("it needs a group of 3 ranks") != std::string::npos);
  input.world_size = 4;
  input.max_context_degree = 2;
  REQUIRE(error_of(input).find("split over 2 ranks") != std::string::npos);
  input.max_context_degree = 0;
  REQUIRE(error_of(input).empty());
  // lb_micro: the collective cannot run dynamic groups.
  input.balance = Balance::lb_micro;
  input.lengths = {100, 10, 10, 10};
  REQUIRE(error_of(input).find("use a static context degree") != std::string::npos);
  // Static: the world must divide, and the shares must fit.
  input.balance = Balance::lb_micro;
  input.context_dynamic = false;
  input.context_degree = 3;
  REQUIRE(error_of(input).find("context degree 3 needs the world size to be a multiple of it") != std::string::npos);
  input.context_degree = 2;
  e = error_of(input);
  REQUIRE(e.find("with context degree 2 the shares of 1 sequence(s) exceed the token cap") != std::string::npos);
  REQUIRE(e.find("sequence 0 (length 100: share 50)") != std::string::npos);
  input.context_degree = 2;
  input.context_dynamic = true;
  REQUIRE(error_of(input).find("choose one") != std::string::npos);
}

TEST_CASE("context groups: the static degree plans for world / degree groups", "[planner][context]") {
  PlanInput input;
  input.world_size = 4;
  input.token_cap = 40;
  input.cost = CostModel::quadratic(0.01, 1.0);
  input.balance = Balance::lb_micro;
  input.context_degree = 2;
  input.lengths = {70, 20, 30, 60};
  const Plan plan = odc::data::make_plan(input);
  REQUIRE(plan.context_degree == 2);
  REQUIRE(plan.groups.empty());
  REQUIRE(plan.ranks.size() == 4);
  for (const int first : {0, 2}) {
    const auto& a = plan.ranks[static_cast<std::size_t>(first)];
    const auto& b = plan.ranks[static_cast<std::size_t>(first + 1)];
    REQUIRE(a.microbatches == b.microbatches);  // a group's members run the same microbatches
    REQUIRE(a.cost == b.cost);
    for (const auto& mb : a.microbatches) {
      std::int64_t rows = 0;
      for (const auto i : mb) rows += odc::data::context_max_rows(input.lengths[static_cast<std::size_t>(i)], 2);
      REQUIRE(rows <= input.token_cap);  // the shares' rows fit one member's cap
    }
  }
  std::vector<int> seen(4, 0);
  for (const int first : {0, 2}) {
    for (const auto& mb : plan.ranks[static_cast<std::size_t>(first)].microbatches) {
      for (const auto i : mb) ++seen[static_cast<std::size_t>(i)];
    }
  }
  REQUIRE(seen == std::vector<int>{1, 1, 1, 1});
  // The hash names the degree.
  PlanInput plain = input;
  plain.context_degree = 1;
  plain.token_cap = 80;
  REQUIRE(odc::data::make_plan(plain).hash() != plan.hash());
}
