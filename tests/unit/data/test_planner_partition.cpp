// Karmarkar-Karp largest differencing and its refinement: a worked example by hand, structural
// properties on seeded random inputs (each item once, parts by decreasing cost, equal sizes, the
// refinement never raising the max nor lowering the min), and the approximation bound against
// brute force on small instances. The whole planner: test_planner.cpp.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iostream>
#include <limits>
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

}  // namespace

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
