// Planner properties on seeded, long-tailed random minibatches (log-normal lengths clipped to
// [16, 4096]): every sequence planned exactly once, token caps, LB-Micro's equal counts, the
// constructed ordering lb_mini <= lb_micro <= local_sort of the largest per-rank cost,
// lb_mini_equal as LB-Micro's split with each rank's own microbatch count, round_robin's greedy
// in-order packing, KK + refinement against brute force, determinism, errors, and the bubble
// formulas' closed forms. Cost models: test_planner_cost_model.cpp; round_robin on
// hand-checked inputs: test_planner_round_robin.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "odc/core/error.h"
#include "odc/data/planner.h"

using odc::data::Balance;
using odc::data::CostModel;
using odc::data::Plan;
using odc::data::PlanInput;
using odc::data::RankPlan;

namespace {

using Parts = std::vector<std::vector<std::int64_t>>;

// splitmix64 + Box-Muller: the same numbers with every standard library.
struct Rng {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  double uniform() { return (static_cast<double>(next() >> 11) + 0.5) * 0x1.0p-53; }
  int below(int bound) { return static_cast<int>(next() % static_cast<std::uint64_t>(bound)); }
  double normal() {
    return std::sqrt(-2.0 * std::log(uniform())) * std::cos(6.283185307179586 * uniform());
  }
};

// Log-normal, median 512, sigma 1.2: most sequences short, a tail up to the 4096 clip.
std::vector<std::int64_t> long_tailed(std::size_t count, Rng& rng) {
  std::vector<std::int64_t> lengths(count);
  for (auto& length : lengths) {
    const double drawn = std::exp(std::log(512.0) + 1.2 * rng.normal());
    length = std::clamp<std::int64_t>(std::llround(drawn), 16, 4096);
  }
  return lengths;
}

std::vector<double> costs_of(const std::vector<std::int64_t>& lengths, const CostModel& cost) {
  std::vector<double> costs;
  for (auto length : lengths) costs.push_back(cost.cost(length));
  return costs;
}

double part_cost(const std::vector<double>& costs, std::vector<std::int64_t> part) {
  std::sort(part.begin(), part.end());
  double sum = 0.0;
  for (auto i : part) sum += costs[static_cast<std::size_t>(i)];
  return sum;
}

double max_part(const std::vector<double>& costs, const Parts& parts) {
  double worst = 0.0;
  for (const auto& part : parts) worst = std::max(worst, part_cost(costs, part));
  return worst;
}

double min_part(const std::vector<double>& costs, const Parts& parts) {
  double best = std::numeric_limits<double>::infinity();
  for (const auto& part : parts) best = std::min(best, part_cost(costs, part));
  return best;
}

void require_each_item_once(const Parts& parts, std::size_t n) {
  std::vector<int> seen(n, 0);
  for (const auto& part : parts) {
    for (auto i : part) {
      REQUIRE(i >= 0);
      REQUIRE(static_cast<std::size_t>(i) < n);
      ++seen[static_cast<std::size_t>(i)];
    }
  }
  REQUIRE(std::all_of(seen.begin(), seen.end(), [](int s) { return s == 1; }));
}

double max_rank_cost(const Plan& plan) {
  double worst = 0.0;
  for (const auto& rank : plan.ranks) worst = std::max(worst, rank.cost);
  return worst;
}

std::vector<std::int64_t> rank_items(const RankPlan& rank) {
  std::vector<std::int64_t> items;
  for (const auto& mb : rank.microbatches) items.insert(items.end(), mb.begin(), mb.end());
  std::sort(items.begin(), items.end());
  return items;
}

// Structure every plan must have, whatever the balance.
void require_valid_plan(const Plan& plan, const PlanInput& input) {
  const auto costs = costs_of(input.lengths, input.cost);
  REQUIRE(plan.ranks.size() == static_cast<std::size_t>(input.world_size));
  Parts all;
  for (const auto& rank : plan.ranks) {
    REQUIRE(rank.microbatch_costs.size() == rank.microbatches.size());
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      const auto& mb = rank.microbatches[m];
      REQUIRE_FALSE(mb.empty());
      REQUIRE(std::is_sorted(mb.begin(), mb.end()));
      std::int64_t tokens = 0;
      for (auto i : mb) tokens += input.lengths[static_cast<std::size_t>(i)];
      REQUIRE(tokens <= input.token_cap);
      REQUIRE(rank.microbatch_costs[m] == part_cost(costs, mb));
      if (m > 0) REQUIRE(rank.microbatch_costs[m - 1] >= rank.microbatch_costs[m]);
      all.push_back(mb);
    }
    // The rank's cost is the canonical (ascending index) sum over its sequences.
    REQUIRE(rank.cost == part_cost(costs, rank_items(rank)));
  }
  require_each_item_once(all, input.lengths.size());
  REQUIRE(plan.bubble_odc() >= 0.0);
  REQUIRE(plan.bubble_odc() < 1.0);
  REQUIRE(plan.bubble_collective() >= plan.bubble_odc());
}

// Optimal max part cost by depth-first enumeration (item 0 fixed in part 0; branches whose max
// already reaches the best are cut). equal_size: part sizes must differ by at most one.
double brute_force_max(const std::vector<double>& costs, int k, bool equal_size) {
  const std::size_t n = costs.size();
  const std::size_t low = n / static_cast<std::size_t>(k);
  const std::size_t high = low + (n % static_cast<std::size_t>(k) ? 1 : 0);
  const std::size_t allowed_high = n % static_cast<std::size_t>(k);  // parts that may hold `high`
  std::vector<double> sums(static_cast<std::size_t>(k), 0.0);
  std::vector<std::size_t> sizes(static_cast<std::size_t>(k), 0);
  double best = std::numeric_limits<double>::infinity();
  std::function<void(std::size_t, double)> visit = [&](std::size_t i, double current) {
    if (current >= best) return;
    if (i == n) {
      if (equal_size) {
        std::size_t at_high = 0;
        for (auto s : sizes) {
          if (s != low && s != high) return;
          if (s == high && high != low) ++at_high;
        }
        if (high != low && at_high != allowed_high) return;
      }
      best = current;
      return;
    }
    for (std::size_t p = 0; p < sums.size(); ++p) {
      if (i == 0 && p > 0) break;
      if (equal_size && sizes[p] >= high) continue;
      sums[p] += costs[i];
      ++sizes[p];
      visit(i + 1, std::max(current, sums[p]));
      sums[p] -= costs[i];
      --sizes[p];
    }
  };
  visit(0, 0.0);
  return best;
}

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

}  // namespace

TEST_CASE("planner: balance names", "[planner]") {
  for (auto balance : {Balance::local_sort, Balance::lb_micro, Balance::lb_mini, Balance::round_robin,
                       Balance::lb_mini_equal}) {
    REQUIRE(odc::data::parse_balance(odc::data::balance_name(balance)) == balance);
  }
  REQUIRE(odc::data::balance_name(Balance::lb_mini_equal) == "lb_mini_equal");
  REQUIRE_THROWS_WITH(odc::data::parse_balance("lb_macro"),
                      Catch::Contains("lb_macro") && Catch::Contains("lb_mini"));
}

TEST_CASE("planner: Karmarkar-Karp worked example and refinement", "[planner]") {
  // {8,7,6,5,4}, k = 2: differencing 8-7, 6-5, then 4 joins 7 opposite 8, then 11|8 meets 6|5:
  // {7,5,4} = 16 against {8,6} = 14. Swapping 7 and 6 (delta 1 = half the gap) reaches 15|15.
  const std::vector<double> costs = {8, 7, 6, 5, 4};
  auto parts = odc::data::karmarkar_karp(costs, 2, false);
  REQUIRE(parts == Parts{{1, 3, 4}, {0, 2}});
  odc::data::refine_partition(costs, parts, false);
  REQUIRE(parts == Parts{{2, 3, 4}, {0, 1}});

  SECTION("equal size: 3 + 2 items") {
    auto equal = odc::data::karmarkar_karp(costs, 2, true);
    REQUIRE(std::max(equal[0].size(), equal[1].size()) == 3);
    REQUIRE(std::min(equal[0].size(), equal[1].size()) == 2);
    odc::data::refine_partition(costs, equal, true);
    REQUIRE(max_part(costs, equal) == 15.0);
  }
  SECTION("degenerate shapes") {
    REQUIRE(odc::data::karmarkar_karp({}, 3, false) == Parts(3));
    REQUIRE(odc::data::karmarkar_karp({5.0}, 1, true) == Parts{{0}});
    REQUIRE(odc::data::karmarkar_karp({1.0, 2.0}, 4, false).size() == 4);
    REQUIRE_THROWS_AS(odc::data::karmarkar_karp({1.0}, 0, false), odc::Error);
    REQUIRE_THROWS_AS(odc::data::karmarkar_karp({-1.0}, 2, false), odc::Error);
    Parts bad = {{0, 0}};
    REQUIRE_THROWS_AS(odc::data::refine_partition({1.0}, bad, false), odc::Error);
  }
}

TEST_CASE("planner: KK partitions and refinement on random inputs", "[planner]") {
  Rng rng{7};
  for (int instance = 0; instance < 300; ++instance) {
    const auto n = static_cast<std::size_t>(rng.below(200));
    const int k = 1 + rng.below(24);
    const bool equal_size = rng.below(2) == 1;
    const auto costs = costs_of(long_tailed(n, rng), CostModel::quadratic(1.0 / 2048.0, 1.0));
    auto parts = odc::data::karmarkar_karp(costs, k, equal_size);
    REQUIRE(parts.size() == static_cast<std::size_t>(k));
    require_each_item_once(parts, n);
    for (const auto& part : parts) REQUIRE(std::is_sorted(part.begin(), part.end()));
    for (std::size_t p = 1; p < parts.size(); ++p) {
      REQUIRE(part_cost(costs, parts[p - 1]) >= part_cost(costs, parts[p]));  // by decreasing cost
    }
    std::vector<std::size_t> sizes;
    for (const auto& part : parts) sizes.push_back(part.size());
    if (equal_size) {
      const auto [lo, hi] = std::minmax_element(sizes.begin(), sizes.end());
      REQUIRE(*hi - *lo <= 1);
    }
    // Refinement: never raises the max nor lowers the min; keeps sizes when equal_size.
    const double before_max = max_part(costs, parts);
    const double before_min = min_part(costs, parts);
    odc::data::refine_partition(costs, parts, equal_size);
    require_each_item_once(parts, n);
    REQUIRE(max_part(costs, parts) <= before_max * (1 + 1e-12));
    REQUIRE(min_part(costs, parts) >= before_min * (1 - 1e-12));
    if (equal_size) {
      for (std::size_t p = 0; p < parts.size(); ++p) REQUIRE(parts[p].size() == sizes[p]);
    }
  }
}

TEST_CASE("planner: KK + refinement against brute force on small instances", "[planner]") {
  // Bound asserted: max part <= (4/3 - 1/(3k)) * optimum, 7/6 for k = 2 and 11/9 for k = 3: the
  // published worst case of largest differencing (Fischetti & Martello for two parts, Michiels et
  // al. for k parts); the refinement never raises the max, so it inherits KK's bound. For the
  // equal-size variant (against the best size-balanced partition) there is no such theorem here:
  // KK alone exceeds it (up to ~1.23 observed), and the same bound is asserted for KK + refinement
  // as an observed property of these seeded instances. The observed worst ratios are printed.
  Rng rng{2024};
  for (int k : {2, 3}) {
    for (bool equal_size : {false, true}) {
      double worst_kk = 1.0, worst_refined = 1.0, mean_refined = 0.0;
      const int instances = 400;
      for (int instance = 0; instance < instances; ++instance) {
        const auto n = static_cast<std::size_t>(2 + rng.below(9));  // 2..10 items
        const auto costs = costs_of(long_tailed(n, rng), CostModel::quadratic(1.0 / 2048.0, 1.0));
        const double optimum = brute_force_max(costs, k, equal_size);
        auto parts = odc::data::karmarkar_karp(costs, k, equal_size);
        const double kk = max_part(costs, parts);
        odc::data::refine_partition(costs, parts, equal_size);
        const double refined = max_part(costs, parts);
        REQUIRE(refined <= kk);
        REQUIRE(refined >= optimum * (1 - 1e-12));
        REQUIRE(refined <= (4.0 / 3.0 - 1.0 / (3.0 * k)) * optimum * (1 + 1e-12));
        worst_kk = std::max(worst_kk, kk / optimum);
        worst_refined = std::max(worst_refined, refined / optimum);
        mean_refined += refined / optimum / instances;
      }
      std::cout << "[planner] brute force k=" << k << (equal_size ? " equal-size" : " free-size")
                << ": worst max/optimal KK " << worst_kk << ", KK+refine " << worst_refined
                << " (mean " << mean_refined << ", bound " << 4.0 / 3.0 - 1.0 / (3.0 * k) << ")\n";
    }
  }
}

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

namespace {

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
        REQUIRE(rank.microbatches == micro.ranks[r].microbatches);
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
