// The plans: LocalSort, LB-Micro, LB-Mini (free or equal sequence counts) and round_robin from the
// splits over the ranks (partition.cpp) and the packing within a rank (microbatches.cpp); the
// balance names; and the plan's metrics (makespans, bubbles, hash).
#include "odc/data/planner.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "odc/core/error.h"
#include "odc/core/hash.h"
#include "planner_parts.h"

namespace odc::data {

namespace {

using planner_detail::as_size;
using planner_detail::Index;
using planner_detail::Parts;
using planner_detail::RankItems;
using planner_detail::set_cost;

// Microbatches by decreasing cost (ties: smaller first index), costs filled in.
RankPlan finish_rank(const std::vector<double>& costs, const std::vector<Index>& items,
                     Parts microbatches) {
  std::vector<std::pair<double, std::vector<Index>>> keyed;
  keyed.reserve(microbatches.size());
  for (auto& mb : microbatches) {
    std::sort(mb.begin(), mb.end());
    const double c = set_cost(costs, mb);
    keyed.emplace_back(c, std::move(mb));
  }
  std::sort(keyed.begin(), keyed.end(), [](const auto& x, const auto& y) {
    if (x.first != y.first) return x.first > y.first;
    return x.second.front() < y.second.front();
  });
  RankPlan plan;
  plan.cost = set_cost(costs, items);
  for (auto& [c, mb] : keyed) {
    plan.microbatch_costs.push_back(c);
    plan.microbatches.push_back(std::move(mb));
  }
  return plan;
}

// One sequence per microbatch, longest first (every rank sorts the same way, so the m-th
// microbatches of all ranks are alike; longest first surfaces memory trouble at once).
RankPlan local_sort_rank(const std::vector<std::int64_t>& lengths, const std::vector<double>& costs,
                         const std::vector<Index>& items) {
  Parts singles;
  for (Index i : items) singles.push_back({i});
  std::sort(singles.begin(), singles.end(), [&](const auto& x, const auto& y) {
    const auto lx = lengths[as_size(x[0])];
    const auto ly = lengths[as_size(y[0])];
    return lx != ly ? lx > ly : x[0] < y[0];
  });
  RankPlan rank;
  rank.cost = set_cost(costs, items);
  for (auto& single : singles) {
    rank.microbatch_costs.push_back(costs[as_size(single[0])]);
    rank.microbatches.push_back(std::move(single));
  }
  return rank;
}

// round_robin's microbatches stay in packing order (no balancing, so no reordering either), and the
// rank's cost is the sum of its microbatch costs.
RankPlan in_order_rank(const std::vector<double>& costs, Parts microbatches) {
  RankPlan plan;
  for (auto& mb : microbatches) {
    const double c = set_cost(costs, mb);
    plan.microbatch_costs.push_back(c);
    plan.cost += c;
    plan.microbatches.push_back(std::move(mb));
  }
  return plan;
}

void validate(const PlanInput& input) {
  if (input.world_size < 1) fail("planner: world size must be >= 1, got {}", input.world_size);
  if (input.lengths.empty()) fail("planner: the global minibatch is empty; expected >= 1 sequence");
  if (input.token_cap <= 0) {
    fail("planner: data.max_tokens_per_microbatch must be > 0, got {}", input.token_cap);
  }
  if (!input.group_of_rank.empty() && input.group_of_rank.size() != static_cast<std::size_t>(input.world_size)) {
    fail("planner: {} ranks' groups for a world of {}; expected one group per rank", input.group_of_rank.size(),
         input.world_size);
  }
  const CostModel& c = input.cost;
  if (!std::isfinite(c.a) || !std::isfinite(c.b) || c.a < 0.0 || c.b < 0.0) {
    fail("planner: cost model '{}' has a = {}, b = {}; expected finite coefficients >= 0", c.kind,
         c.a, c.b);
  }
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    const auto length = input.lengths[i];
    if (length < 1) {
      fail("planner: sequence {} of the minibatch has length {}; expected >= 1", i, length);
    }
    if (length > input.token_cap) {
      fail(
          "planner: sequence {} of the minibatch has length {}, longer than the token cap "
          "data.max_tokens_per_microbatch = {}; raise the cap or filter out longer sequences",
          i, length, input.token_cap);
    }
  }
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  const bool equal_counts =
      input.balance == Balance::lb_micro || input.balance == Balance::lb_mini_equal;
  if (equal_counts && n % ranks != 0) {
    fail(
        "planner: {} needs the global minibatch ({} sequences) to divide evenly over {} "
        "ranks (equal sequence counts per rank)",
        balance_name(input.balance), n, ranks);
  }
}

}  // namespace

// ---- public API ---------------------------------------------------------------------------------

Balance parse_balance(const std::string& name) {
  if (name == "local_sort") return Balance::local_sort;
  if (name == "lb_micro") return Balance::lb_micro;
  if (name == "lb_mini") return Balance::lb_mini;
  if (name == "round_robin") return Balance::round_robin;
  if (name == "lb_mini_equal") return Balance::lb_mini_equal;
  fail("data.balance must be one of local_sort, lb_micro, lb_mini, round_robin, lb_mini_equal; "
       "got '{}'",
       name);
}

std::string balance_name(Balance balance) {
  switch (balance) {
    case Balance::local_sort: return "local_sort";
    case Balance::lb_micro: return "lb_micro";
    case Balance::lb_mini: return "lb_mini";
    case Balance::round_robin: return "round_robin";
    case Balance::lb_mini_equal: return "lb_mini_equal";
  }
  fail("unknown Balance value {}", static_cast<int>(balance));
}

Plan make_plan(const PlanInput& input) {
  validate(input);
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  std::vector<double> costs(n);
  for (std::size_t i = 0; i < n; ++i) costs[i] = input.cost.cost(input.lengths[i]);

  Plan plan;
  plan.ranks.reserve(ranks);
  if (input.balance == Balance::local_sort || input.balance == Balance::round_robin) {
    for (const auto& items : planner_detail::round_robin(n, ranks)) {
      if (input.balance == Balance::local_sort) {
        plan.ranks.push_back(local_sort_rank(input.lengths, costs, items));
      } else {
        const RankItems rank{items, input.lengths, costs, input.token_cap};
        plan.ranks.push_back(in_order_rank(costs, planner_detail::in_order_microbatches(rank)));
      }
    }
    return plan;
  }

  // lb_mini_equal: lb_micro's equal-count split, each rank keeping its own minimal count below.
  const Parts split = input.balance == Balance::lb_mini
                          ? planner_detail::free_count_split(costs, ranks)
                          : planner_detail::equal_count_split(costs, ranks);
  std::vector<Parts> packed(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    const RankItems rank{split[r], input.lengths, costs, input.token_cap};
    packed[r] = planner_detail::minimal_microbatches(rank);
  }
  if (input.balance == Balance::lb_micro) {
    // Collectives need the same count among the ranks that run them together: the largest minimal
    // count of the rank's group (all ranks unless group_of_rank says otherwise).
    const auto group = [&](std::size_t r) { return input.group_of_rank.empty() ? 0 : input.group_of_rank[r]; };
    std::map<int, std::size_t> common_of;
    for (std::size_t r = 0; r < ranks; ++r) common_of[group(r)] = std::max(common_of[group(r)], packed[r].size());
    for (std::size_t r = 0; r < ranks; ++r) {
      const std::size_t common = common_of[group(r)];
      if (packed[r].size() == common) continue;
      packed[r] = planner_detail::exact_microbatches(
          RankItems{split[r], input.lengths, costs, input.token_cap}, common, std::move(packed[r]));
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    plan.ranks.push_back(finish_rank(costs, split[r], std::move(packed[r])));
  }
  return plan;
}

// Both bubbles are computed as 1 - S / (D * X) from the same S = sum_d C_d, with X = max_d C_d
// (odc) or sum_m max_d c_{m,d} (collective). Mathematically the latter X is >= the former; taking
// the max of the two guards the rounding of the differently ordered sums, so that the computed
// bubble_collective >= bubble_odc holds exactly (rounding is monotone).
double Plan::makespan_odc() const {
  double worst = 0.0;
  for (const auto& rank : ranks) worst = std::max(worst, rank.cost);
  return worst;
}

double Plan::makespan_collective() const {
  std::size_t steps = 0;
  for (const auto& rank : ranks) {
    ODC_CHECK(rank.microbatch_costs.size() == rank.microbatches.size(),
              "{} microbatch costs for {} microbatches", rank.microbatch_costs.size(), rank.microbatches.size());
    steps = std::max(steps, rank.microbatch_costs.size());
  }
  double barriers = 0.0;
  for (std::size_t m = 0; m < steps; ++m) {
    double slowest = 0.0;
    for (const auto& rank : ranks) {
      if (m < rank.microbatch_costs.size()) slowest = std::max(slowest, rank.microbatch_costs[m]);
    }
    barriers += slowest;
  }
  // Round-off in the sums must not make a barrier schedule look faster than the slowest rank.
  return std::max(barriers, makespan_odc());
}

namespace {
double bubble_of(const std::vector<RankPlan>& ranks, double makespan) {
  if (!(makespan > 0.0)) return 0.0;
  double total = 0.0;
  for (const auto& rank : ranks) total += rank.cost;
  return 1.0 - total / (static_cast<double>(ranks.size()) * makespan);
}
}  // namespace

double Plan::bubble_odc() const { return bubble_of(ranks, makespan_odc()); }

double Plan::bubble_collective() const { return bubble_of(ranks, makespan_collective()); }

std::int64_t Plan::max_microbatches() const {
  std::size_t most = 0;
  for (const auto& rank : ranks) most = std::max(most, rank.microbatches.size());
  return static_cast<std::int64_t>(most);
}

std::uint64_t Plan::hash() const {
  Fnv1a h;
  h.add_value(static_cast<std::int64_t>(ranks.size()));
  for (const auto& rank : ranks) {
    h.add_value(static_cast<std::int64_t>(rank.microbatches.size()));
    for (const auto& mb : rank.microbatches) {
      h.add_value(static_cast<std::int64_t>(mb.size()));
      for (Index i : mb) h.add_value(i);
    }
  }
  return h.value();
}


}  // namespace odc::data
