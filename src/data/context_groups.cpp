// Context parallelism in the planner: the share of a split sequence and its cost
// (odc/data/context_groups.h), and the two plans that split sequences: dynamic groups chosen per
// minibatch (ODC) and the static degree (collective).
#include "odc/data/context_groups.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "odc/core/error.h"
#include "odc/model/context_split.h"
#include "planner_parts.h"

namespace odc::data {

std::int64_t context_max_rows(std::int64_t length, int k) { return model::ContextCut{length, k}.max_rows(); }

std::int64_t context_rows(std::int64_t length, int k, int member) {
  return model::ContextCut{length, k}.rows_of(member);
}

double context_share_pairs(std::int64_t length, int k, int member) {
  return model::ContextCut{length, k}.pairs_of(member);
}

double context_share_cost(const CostModel& cost, std::int64_t length, int k, int member) {
  const auto rows = static_cast<double>(context_rows(length, k, member));
  const double pairs = context_share_pairs(length, k, member);
  const auto l = static_cast<double>(length);
  double compute = 0.0;
  if (cost.lengths.empty()) {
    compute = 2.0 * cost.a * pairs + (cost.b - cost.a) * rows;
  } else {
    // The measured model has no separate attention term: the per-token cost beyond the shortest
    // measured length's is taken as attention's (it grows with the length, the rest does not).
    const double at_length = cost.measured_per_token(length);
    const double base = cost.measured_per_token(cost.lengths.front());
    const double f = at_length > 0.0 ? std::clamp(1.0 - base / at_length, 0.0, 1.0) : 0.0;
    compute = cost.cost(length) * ((1.0 - f) * rows / l + f * pairs / (l * (l + 1.0) / 2.0));
  }
  const double exchange = cost.exchange_per_token * l * static_cast<double>(k - 1) / static_cast<double>(k);
  return compute + exchange;
}

double context_group_cost(const CostModel& cost, std::int64_t length, int k) {
  double worst = 0.0;
  for (int member = 0; member < k; ++member) worst = std::max(worst, context_share_cost(cost, length, k, member));
  return worst;
}

int smallest_context_degree(std::int64_t length, std::int64_t cap) {
  if (cap < 1) fail("context parallelism: the token cap must be >= 1, got {}", cap);
  if (length <= cap) return 1;
  // Member 0 holds two chunks of at least floor(L / 2k) rows, so max rows >= L/k - 2 and no k below
  // L / (cap + 2) fits: search upward from there; k = length always fits (member 0 then holds one
  // row).
  std::int64_t k = std::max<std::int64_t>(1, length / (cap + 2));
  while (k < length && context_max_rows(length, static_cast<int>(k)) > cap) ++k;
  return static_cast<int>(k);
}

namespace planner_detail {

namespace {

// The largest group a sequence may use.
int degree_limit(const PlanInput& input) {
  return input.max_context_degree == 0 ? input.world_size : std::min(input.max_context_degree, input.world_size);
}

void check_dynamic(const PlanInput& input) {
  if (input.context_degree != 1) {
    fail("planner: dynamic context parallelism (train.context_parallel) and a static context degree {} were both "
         "asked for; choose one",
         input.context_degree);
  }
  if (input.max_context_degree < 0) {
    fail("planner: the largest context group must be >= 0 ranks (0: the world), got {}", input.max_context_degree);
  }
  switch (input.balance) {
    case Balance::lb_mini:
    case Balance::local_sort:
    case Balance::round_robin: return;
    case Balance::lb_micro:
    case Balance::ref_lb_micro:
      fail("planner: data.balance {} cannot run dynamic context groups (train.context_parallel): its collectives run "
           "every microbatch on all ranks together, which a group of some ranks cannot join; use a static context "
           "degree (every sequence split over fixed groups of consecutive ranks) with the collective, or ODC with "
           "lb_mini",
           balance_name(input.balance));
    case Balance::lb_mini_equal:
    case Balance::ref_lb_mini:
      fail("planner: data.balance {} does not plan dynamic context groups (train.context_parallel); use lb_mini, "
           "local_sort or round_robin",
           balance_name(input.balance));
  }
}

// The groups' members for the given degrees (longest sequences first, `split` in that order):
// each group takes the k ranks with the least planned load so far (ties: the lower rank), member 0
// (the most rows) the least loaded. Then the other sequences are balanced around the loads.
Plan plan_with_groups(const PlanInput& input, const std::vector<std::int64_t>& split, const std::vector<int>& degrees) {
  const auto ranks = static_cast<std::size_t>(input.world_size);
  const double c = input.cost.per_microbatch;
  std::vector<double> loads(ranks, 0.0);       // what the balancing sees: shares + their microbatches' c
  std::vector<double> share_costs(ranks, 0.0);  // RankPlan::cost's part
  std::vector<std::vector<int>> member_of(ranks);
  std::vector<ContextGroup> groups;
  for (std::size_t g = 0; g < split.size(); ++g) {
    ContextGroup group;
    group.sequence = split[g];
    group.cost = context_group_cost(input.cost, input.lengths[as_size(split[g])], degrees[g]);
    std::vector<std::size_t> order(ranks);
    std::iota(order.begin(), order.end(), std::size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return loads[x] < loads[y]; });
    for (int m = 0; m < degrees[g]; ++m) {
      const std::size_t r = order[static_cast<std::size_t>(m)];
      group.ranks.push_back(static_cast<int>(r));
      loads[r] += group.cost + c;
      share_costs[r] += group.cost;
      member_of[r].push_back(static_cast<int>(g));
    }
    groups.push_back(std::move(group));
  }
  // The other sequences, re-indexed (ascending, so the mapping back keeps microbatches ascending).
  std::vector<bool> is_split(input.lengths.size(), false);
  for (const auto i : split) is_split[as_size(i)] = true;
  std::vector<Index> rest;
  PlanInput sub = input;
  sub.lengths.clear();
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    if (is_split[i]) continue;
    rest.push_back(static_cast<Index>(i));
    sub.lengths.push_back(input.lengths[i]);
  }
  Plan plan;
  if (rest.empty()) {
    plan.per_microbatch = c;
    plan.ranks.resize(ranks);
  } else {
    std::vector<double> costs(sub.lengths.size());
    for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = input.cost.cost(sub.lengths[i]);
    plan = plan_around(sub, costs, loads);
    for (auto& rank : plan.ranks) {
      for (auto& mb : rank.microbatches) {
        for (auto& i : mb) i = rest[as_size(i)];
      }
    }
  }
  for (std::size_t r = 0; r < ranks; ++r) {
    plan.ranks[r].cost += share_costs[r];
    plan.ranks[r].groups = std::move(member_of[r]);
  }
  plan.groups = std::move(groups);
  return plan;
}

}  // namespace

Plan dynamic_context_plan(const PlanInput& input) {
  check_dynamic(input);
  std::vector<std::int64_t> split;
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    if (input.lengths[i] > input.token_cap) split.push_back(static_cast<std::int64_t>(i));
  }
  std::vector<double> costs(input.lengths.size());
  for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = input.cost.cost(input.lengths[i]);
  if (split.empty()) return plan_sequences(input, costs);  // nothing to split: the plan without groups
  // Longest first (the execution order of the groups too); ties by index.
  std::stable_sort(split.begin(), split.end(),
                   [&](std::int64_t x, std::int64_t y) { return input.lengths[as_size(x)] > input.lengths[as_size(y)]; });
  const int limit = degree_limit(input);
  std::vector<int> degrees;
  for (const auto i : split) {
    const auto length = input.lengths[as_size(i)];
    const int k = smallest_context_degree(length, input.token_cap);
    if (k > limit) {
      fail("planner: sequence {} of the minibatch has length {}: split over {} ranks (the most a context group may "
           "have{}) its largest share still exceeds the token cap data.max_tokens_per_microbatch = {}; it needs a "
           "group of {} ranks",
           i, length, limit, limit == input.world_size ? ": the world" : "", input.token_cap, k);
    }
    degrees.push_back(k);
  }
  Plan best = plan_with_groups(input, split, degrees);
  // Larger groups where they shorten the ODC makespan (a long sequence on the smallest group can
  // be the minibatch's critical path): each group in turn tries every larger degree, the others
  // kept, and keeps the best found (shorter by more than rounding, 1e-12 relative).
  for (std::size_t g = 0; g < split.size(); ++g) {
    const int chosen = degrees[g];
    int best_k = chosen;
    for (int k = chosen + 1; k <= limit; ++k) {
      degrees[g] = k;
      Plan trial = plan_with_groups(input, split, degrees);
      if (trial.makespan_odc() < best.makespan_odc() * (1.0 - 1e-12)) {
        best = std::move(trial);
        best_k = k;
      }
    }
    degrees[g] = best_k;
  }
  return best;
}

Plan static_context_plan(const PlanInput& input) {
  const int d = input.context_degree;
  if (d < 1) fail("planner: the context degree must be >= 1, got {}", d);
  if (input.context_dynamic) {
    fail("planner: dynamic context parallelism (train.context_parallel) and a static context degree {} were both "
         "asked for; choose one",
         d);
  }
  if (input.world_size < 1) fail("planner: world size must be >= 1, got {}", input.world_size);
  if (input.token_cap <= 0) fail("planner: data.max_tokens_per_microbatch must be > 0, got {}", input.token_cap);
  if (input.world_size % d != 0) {
    fail("planner: context degree {} needs the world size to be a multiple of it (groups of {} consecutive ranks); "
         "got {} ranks",
         d, d, input.world_size);
  }
  // Every sequence is split; a member's microbatch holds its share of each, so the cap bounds the
  // sum of the shares' rows: the plan packs the largest share (member 0's) against it.
  PlanInput inner = input;
  inner.context_degree = 1;
  inner.world_size = input.world_size / d;
  if (!input.group_of_rank.empty()) {
    inner.group_of_rank.clear();
    for (int r = 0; r < input.world_size; r += d) inner.group_of_rank.push_back(input.group_of_rank[as_size(r)]);
  }
  std::vector<double> costs(input.lengths.size());
  std::string over;
  int over_count = 0;
  for (std::size_t i = 0; i < input.lengths.size(); ++i) {
    const auto length = input.lengths[i];
    if (length < 1) fail("planner: sequence {} of the minibatch has length {}; expected >= 1", i, length);
    inner.lengths[i] = context_max_rows(length, d);
    costs[i] = context_group_cost(input.cost, length, d);
    if (inner.lengths[i] > input.token_cap && ++over_count <= 8) {
      over += fmt::format("{}sequence {} (length {}: share {})", over.empty() ? "" : ", ", i, length, inner.lengths[i]);
    }
  }
  if (over_count > 0) {
    fail("planner: with context degree {} the shares of {} sequence(s) exceed the token cap "
         "data.max_tokens_per_microbatch = {}: {}{}; raise the degree or the cap",
         d, over_count, input.token_cap, over, over_count > 8 ? ", ..." : "");
  }
  validate(inner, true);
  const Plan groups = plan_sequences(inner, costs);
  Plan plan;
  plan.per_microbatch = groups.per_microbatch;
  plan.context_degree = d;
  for (const auto& rank : groups.ranks) {
    for (int m = 0; m < d; ++m) plan.ranks.push_back(rank);
  }
  return plan;
}

}  // namespace planner_detail

}  // namespace odc::data
