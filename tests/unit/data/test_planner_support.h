#pragma once
// What the planner's tests share: a seeded generator of long-tailed sequence lengths (log-normal,
// clipped to [16, 4096]), canonical cost sums, and the structure every plan must have whatever its
// balance (each sequence once, token caps, microbatches by decreasing cost, canonical rank costs).
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <vector>

#include "odc/data/planner.h"

namespace odc::test::planner {

using odc::data::CostModel;
using odc::data::Plan;
using odc::data::PlanInput;
using odc::data::RankPlan;
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
inline std::vector<std::int64_t> long_tailed(std::size_t count, Rng& rng) {
  std::vector<std::int64_t> lengths(count);
  for (auto& length : lengths) {
    const double drawn = std::exp(std::log(512.0) + 1.2 * rng.normal());
    length = std::clamp<std::int64_t>(std::llround(drawn), 16, 4096);
  }
  return lengths;
}

inline std::vector<double> costs_of(const std::vector<std::int64_t>& lengths, const CostModel& cost) {
  std::vector<double> costs;
  for (auto length : lengths) costs.push_back(cost.cost(length));
  return costs;
}

inline double part_cost(const std::vector<double>& costs, std::vector<std::int64_t> part) {
  std::sort(part.begin(), part.end());
  double sum = 0.0;
  for (auto i : part) sum += costs[static_cast<std::size_t>(i)];
  return sum;
}

inline void require_each_item_once(const Parts& parts, std::size_t n) {
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

inline double max_rank_cost(const Plan& plan) {
  double worst = 0.0;
  for (const auto& rank : plan.ranks) worst = std::max(worst, rank.cost);
  return worst;
}

inline std::vector<std::int64_t> rank_items(const RankPlan& rank) {
  std::vector<std::int64_t> items;
  for (const auto& mb : rank.microbatches) items.insert(items.end(), mb.begin(), mb.end());
  std::sort(items.begin(), items.end());
  return items;
}

// Structure every plan must have, whatever the balance.
inline void require_valid_plan(const Plan& plan, const PlanInput& input) {
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

}  // namespace odc::test::planner
