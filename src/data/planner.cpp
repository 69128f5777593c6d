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
#include "odc/data/reference_planners.h"
#include "planner_parts.h"

namespace odc::data {

namespace {

using planner_detail::as_size;
using planner_detail::Index;
using planner_detail::Parts;
using planner_detail::RankItems;
using planner_detail::set_cost;

}  // namespace

RankPlan planner_detail::finish_rank(const std::vector<double>& costs, const std::vector<Index>& items,
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

namespace {

using planner_detail::finish_rank;

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

}  // namespace

void planner_detail::validate(const PlanInput& input, bool check_cap) {
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
    if (check_cap && length > input.token_cap) {
      fail(
          "planner: sequence {} of the minibatch has length {}, longer than the token cap "
          "data.max_tokens_per_microbatch = {}; raise the cap or filter out longer sequences, or split such "
          "sequences over several ranks (context parallelism: train.context_parallel)",
          i, length, input.token_cap);
    }
  }
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  const bool equal_counts = input.balance == Balance::lb_micro || input.balance == Balance::lb_mini_equal ||
                            input.balance == Balance::ref_lb_micro;
  if (equal_counts && n % ranks != 0) {
    fail(
        "planner: {} needs the global minibatch ({} sequences) to divide evenly over {} "
        "ranks (equal sequence counts per rank)",
        balance_name(input.balance), n, ranks);
  }
}

// ---- public API ---------------------------------------------------------------------------------

Balance parse_balance(const std::string& name) {
  if (name == "local_sort") return Balance::local_sort;
  if (name == "lb_micro") return Balance::lb_micro;
  if (name == "lb_mini") return Balance::lb_mini;
  if (name == "round_robin") return Balance::round_robin;
  if (name == "lb_mini_equal") return Balance::lb_mini_equal;
  if (name == "ref_lb_micro") return Balance::ref_lb_micro;
  if (name == "ref_lb_mini") return Balance::ref_lb_mini;
  fail("data.balance must be one of local_sort, lb_micro, lb_mini, round_robin, lb_mini_equal, ref_lb_micro, "
       "ref_lb_mini; got '{}'",
       name);
}

std::string balance_name(Balance balance) {
  switch (balance) {
    case Balance::local_sort: return "local_sort";
    case Balance::lb_micro: return "lb_micro";
    case Balance::lb_mini: return "lb_mini";
    case Balance::round_robin: return "round_robin";
    case Balance::lb_mini_equal: return "lb_mini_equal";
    case Balance::ref_lb_micro: return "ref_lb_micro";
    case Balance::ref_lb_mini: return "ref_lb_mini";
  }
  fail("unknown Balance value {}", static_cast<int>(balance));
}

namespace {

// lb_micro's barrier schedule, improved without touching the ranks' sequences: a rank's sequence
// moves from a later microbatch into an earlier one when the earlier one stays within that step's
// slowest microbatch (of any rank) and the cap, and the later one keeps a sequence. No step's
// maximum rises and the later step's may fall; each rank's microbatches are then sorted again by
// decreasing cost, which (the steps' maxima decreasing too) cannot raise the sum of the maxima:
// the collective makespan never grows, the ranks' costs (ODC's) do not change. A bounded number
// of passes.
void align_to_steps(Plan& plan, const std::vector<double>& costs, const std::vector<std::int64_t>& lengths,
                    std::int64_t cap) {
  for (int pass = 0; pass < 4; ++pass) {
    std::size_t steps = 0;
    for (const auto& rank : plan.ranks) steps = std::max(steps, rank.microbatches.size());
    std::vector<double> slowest(steps, 0.0);
    for (const auto& rank : plan.ranks) {
      for (std::size_t m = 0; m < rank.microbatch_costs.size(); ++m) slowest[m] = std::max(slowest[m], rank.microbatch_costs[m]);
    }
    bool moved = false;
    for (auto& rank : plan.ranks) {
      auto& mbs = rank.microbatches;
      std::vector<std::int64_t> tokens(mbs.size(), 0);
      for (std::size_t m = 0; m < mbs.size(); ++m) {
        for (const Index i : mbs[m]) tokens[m] += lengths[planner_detail::as_size(i)];
      }
      for (std::size_t later = mbs.size(); later-- > 1;) {
        for (std::size_t k = 0; k < mbs[later].size() && mbs[later].size() > 1;) {
          const Index item = mbs[later][k];
          const double c = costs[planner_detail::as_size(item)];
          const std::int64_t length = lengths[planner_detail::as_size(item)];
          std::size_t to = later;
          for (std::size_t earlier = 0; earlier < later; ++earlier) {
            if (rank.microbatch_costs[earlier] + c <= slowest[earlier] && tokens[earlier] + length <= cap) {
              to = earlier;
              break;
            }
          }
          if (to == later) {
            ++k;
            continue;
          }
          mbs[later].erase(mbs[later].begin() + static_cast<std::ptrdiff_t>(k));
          mbs[to].push_back(item);
          rank.microbatch_costs[later] -= c;
          rank.microbatch_costs[to] += c;
          tokens[later] -= length;
          tokens[to] += length;
          moved = true;
        }
      }
    }
    if (!moved) return;
    for (auto& rank : plan.ranks) {
      std::vector<Index> items;
      for (const auto& mb : rank.microbatches) items.insert(items.end(), mb.begin(), mb.end());
      const double total = rank.cost;  // the same sequences: their cost summed as the split's
      rank = finish_rank(costs, items, std::move(rank.microbatches));
      rank.cost = total;
    }
  }
}

// The reference's plan replaces ours only when shorter by more than the rounding of differently
// ordered sums (1e-12 relative): on a tie to rounding ours is kept, whose microbatch counts are
// often lower (each has a fixed cost that a cost model without c does not see). So ours is at most
// the reference's x (1 + 1e-12).
bool clearly_shorter(double reference, double ours) { return reference < ours * (1.0 - 1e-12); }

// The ranks run their collectives in one group (no groups, or all in the same one).
bool in_one_group(const PlanInput& input) {
  return input.group_of_rank.empty() || std::all_of(input.group_of_rank.begin(), input.group_of_rank.end(),
                                                    [&](int g) { return g == input.group_of_rank.front(); });
}

// A split's plan: each rank's minimal microbatches; with lb_micro the common count of each group,
// or for one group the reference's common count when its barrier schedule is faster.
Plan packed_plan(const PlanInput& input, const std::vector<double>& costs, const Parts& split, bool refined = true) {
  const std::size_t ranks = split.size();
  Plan plan;
  plan.per_microbatch = input.cost.per_microbatch;
  plan.ranks.reserve(ranks);
  std::vector<Parts> packed(ranks);
  for (std::size_t r = 0; r < ranks; ++r) {
    const RankItems rank{split[r], input.lengths, costs, input.token_cap};
    packed[r] = planner_detail::minimal_microbatches(rank, refined);
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
  const bool one_group = in_one_group(input);
  if (input.balance == Balance::lb_micro && one_group) {
    // The reference's way to a common count (the smallest at which every rank's balanced split
    // fits, rather than the largest rank's own and the others split up to it): kept when its
    // barrier schedule is faster. Neither wins every minibatch; the better of the two is never
    // slower than either.
    std::vector<RankItems> items;
    for (std::size_t r = 0; r < ranks; ++r) items.push_back({split[r], input.lengths, costs, input.token_cap});
    auto common = planner_detail::common_count_microbatches(items);
    // Never more microbatches than the rank's own way gives: each has a fixed cost the cost model
    // does not see.
    if (!common.empty() && common.front().size() <= plan.ranks.front().microbatches.size()) {
      Plan other;
      other.per_microbatch = plan.per_microbatch;
      for (std::size_t r = 0; r < ranks; ++r) other.ranks.push_back(finish_rank(costs, split[r], std::move(common[r])));
      if (other.makespan_collective() < plan.makespan_collective()) plan = std::move(other);
    }
  }
  if (input.balance == Balance::lb_micro && one_group) align_to_steps(plan, costs, input.lengths, input.token_cap);
  return plan;
}

}  // namespace

Plan make_plan(const PlanInput& input) {
  // Split sequences: the context plans (context_groups.cpp) check their own caps (the static one
  // validates the plan it makes for world / degree ranks).
  if (input.context_degree != 1) return planner_detail::static_context_plan(input);
  planner_detail::validate(input, !input.context_dynamic);
  if (input.context_dynamic) return planner_detail::dynamic_context_plan(input);
  std::vector<double> costs(input.lengths.size());
  for (std::size_t i = 0; i < costs.size(); ++i) costs[i] = input.cost.cost(input.lengths[i]);
  return planner_detail::plan_sequences(input, costs);
}

Plan planner_detail::plan_sequences(const PlanInput& input, const std::vector<double>& costs) {
  const auto n = input.lengths.size();
  const auto ranks = static_cast<std::size_t>(input.world_size);
  Plan plan;
  plan.per_microbatch = input.cost.per_microbatch;
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

  if (input.balance == Balance::ref_lb_micro) {
    return reference_plan(input, costs, ReferencePacking::same_micro, input.reference_split);
  }
  if (input.balance == Balance::ref_lb_mini) {
    return reference_plan(input, costs, ReferencePacking::diff_micro, input.reference_split);
  }
  // lb_mini_equal: lb_micro's split (ours, or the reference's where lb_micro keeps its plan), each
  // rank keeping its own minimal count.
  if (input.balance == Balance::lb_mini_equal) {
    PlanInput micro = input;
    micro.balance = Balance::lb_micro;
    Parts split;
    for (const auto& rank : plan_sequences(micro, costs).ranks) {
      std::vector<Index> items;
      for (const auto& mb : rank.microbatches) items.insert(items.end(), mb.begin(), mb.end());
      std::sort(items.begin(), items.end());
      split.push_back(std::move(items));
    }
    return packed_plan(input, costs, split);
  }
  if (input.balance == Balance::lb_mini) {
    const std::vector<Parts> candidates = planner_detail::free_count_candidates(costs, ranks);
    const std::size_t preferred = planner_detail::preferred_free_count(costs, candidates);
    Plan chosen = packed_plan(input, costs, candidates[preferred]);
    if (input.cost.per_microbatch > 0.0) {
      // With a fixed cost per microbatch, a rank's time is its sequences' cost plus its count's:
      // the other candidate packed too, and the lower ODC makespan with it kept.
      for (std::size_t k = 0; k < candidates.size(); ++k) {
        if (k == preferred) continue;
        Plan candidate = packed_plan(input, costs, candidates[k]);
        if (candidate.makespan_odc() < chosen.makespan_odc()) chosen = std::move(candidate);
      }
    }
    // Never worse than the reference: its plan as a candidate.
    const Plan reference = reference_plan(input, costs, ReferencePacking::diff_micro, ReferenceSplit::spread);
    return clearly_shorter(reference.makespan_odc(), chosen.makespan_odc()) ? reference : chosen;
  }
  // lb_micro: the split packed with refined and with plain microbatch splits (neither wins every
  // minibatch under barriers); the faster barrier schedule kept (the refined one on a tie).
  const Parts split = planner_detail::equal_count_split(costs, ranks);
  Plan refined = packed_plan(input, costs, split, true);
  Plan plain = packed_plan(input, costs, split, false);
  const bool fewer_or_same = plain.ranks.front().microbatches.size() <= refined.ranks.front().microbatches.size();
  Plan chosen = fewer_or_same && plain.makespan_collective() < refined.makespan_collective() ? plain : refined;
  if (!in_one_group(input)) return chosen;
  // Never worse than the reference: its plan as a candidate, aligned to the steps like ours (it
  // has equal microbatch counts, so it runs under one group's collectives). With several groups
  // each runs its own barriers, which makespan_collective does not measure: ours is kept.
  // Without a cost per microbatch the model cannot price the reference's extra microbatches, so then
  // (as for the common count above) a plan with more of them is not taken.
  Plan reference = reference_plan(input, costs, ReferencePacking::same_micro, input.reference_split);
  if (input.cost.per_microbatch == 0.0 && reference.max_microbatches() > chosen.max_microbatches()) return chosen;
  align_to_steps(reference, costs, input.lengths, input.token_cap);
  return clearly_shorter(reference.makespan_collective(), chosen.makespan_collective()) ? reference : chosen;
}

Plan planner_detail::plan_around(const PlanInput& input, const std::vector<double>& costs,
                                 const std::vector<double>& loads) {
  const auto ranks = static_cast<std::size_t>(input.world_size);
  Plan plan;
  plan.per_microbatch = input.cost.per_microbatch;
  if (input.balance == Balance::local_sort || input.balance == Balance::round_robin) {
    // No balancing: the loads change nothing.
    for (const auto& items : round_robin(costs.size(), ranks)) {
      if (input.balance == Balance::local_sort) {
        plan.ranks.push_back(local_sort_rank(input.lengths, costs, items));
      } else {
        const RankItems rank{items, input.lengths, costs, input.token_cap};
        plan.ranks.push_back(in_order_rank(costs, in_order_microbatches(rank)));
      }
    }
    return plan;
  }
  ODC_CHECK(input.balance == Balance::lb_mini, "plan_around: balance {}", balance_name(input.balance));
  // LB-Mini around the loads: Karmarkar-Karp with every rank's load as an item fixed to it, refined
  // without moving them; each rank then packs its own sequences. (Neither the equal-count split nor
  // the reference's plan is a candidate: both ignore the loads.)
  return packed_plan(input, costs, loaded_split(costs, loads));
}

// Both bubbles are computed as 1 - S / (D * X) from the same S = sum_d (C_d + n_d c), with X =
// max_d (C_d + n_d c) (odc) or sum_m (c + max_d c_{m,d}) (collective); c = per_microbatch. Mathematically the latter X is >= the former; taking
// the max of the two guards the rounding of the differently ordered sums, so that the computed
// bubble_collective >= bubble_odc holds exactly (rounding is monotone).
double Plan::makespan_odc() const {
  double worst = 0.0;
  if (groups.empty()) {
    for (const auto& rank : ranks) worst = std::max(worst, busy(rank));
    return worst;
  }
  // The schedule: the groups in order, each when its last member is ready, then every rank's own.
  std::vector<double> ready(ranks.size(), 0.0);
  std::vector<double> shares(ranks.size(), 0.0);
  for (const auto& group : groups) {
    double start = 0.0;
    for (const int r : group.ranks) start = std::max(start, ready.at(static_cast<std::size_t>(r)));
    for (const int r : group.ranks) {
      ready[static_cast<std::size_t>(r)] = start + group.cost + per_microbatch;
      shares[static_cast<std::size_t>(r)] += group.cost;
    }
  }
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const auto& rank = ranks[r];
    const double own = rank.cost - shares[r] + static_cast<double>(rank.microbatches.size()) * per_microbatch;
    worst = std::max(worst, ready[r] + own);
  }
  // Never below the busiest rank (rounding of the subtraction above).
  for (const auto& rank : ranks) worst = std::max(worst, busy(rank));
  return worst;
}

double Plan::busy(const RankPlan& rank) const {
  return rank.cost + static_cast<double>(rank.microbatches.size() + rank.groups.size()) * per_microbatch;
}

double Plan::makespan_collective() const {
  std::size_t steps = 0;
  for (const auto& rank : ranks) {
    ODC_CHECK(rank.microbatch_costs.size() == rank.microbatches.size(),
              "{} microbatch costs for {} microbatches", rank.microbatch_costs.size(), rank.microbatches.size());
    steps = std::max(steps, rank.microbatch_costs.size());
  }
  double barriers = 0.0;
  for (const auto& group : groups) barriers += group.cost + per_microbatch;  // a barrier step each
  for (std::size_t m = 0; m < steps; ++m) {
    double slowest = 0.0;
    for (const auto& rank : ranks) {
      if (m < rank.microbatch_costs.size()) slowest = std::max(slowest, rank.microbatch_costs[m]);
    }
    barriers += slowest + per_microbatch;  // some rank runs an m-th microbatch
  }
  // Round-off in the sums must not make a barrier schedule look faster than the slowest rank.
  return std::max(barriers, makespan_odc());
}

double Plan::bubble_of(double makespan) const {
  if (!(makespan > 0.0)) return 0.0;
  double total = 0.0;
  for (const auto& rank : ranks) total += busy(rank);
  return 1.0 - total / (static_cast<double>(ranks.size()) * makespan);
}

double Plan::bubble_odc() const { return bubble_of(makespan_odc()); }

double Plan::bubble_collective() const { return bubble_of(makespan_collective()); }

std::int64_t Plan::max_microbatches() const {
  std::size_t most = 0;
  for (const auto& rank : ranks) most = std::max(most, rank.microbatches.size() + rank.groups.size());
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
  // Context parallelism, only when present (the hash of a plan without it is unchanged).
  if (!groups.empty()) {
    h.add_value(static_cast<std::int64_t>(groups.size()));
    for (const auto& group : groups) {
      h.add_value(group.sequence);
      h.add_value(static_cast<std::int64_t>(group.ranks.size()));
      for (const int r : group.ranks) h.add_value(static_cast<std::int64_t>(r));
    }
  }
  if (context_degree != 1) h.add_value(static_cast<std::int64_t>(context_degree));
  return h.value();
}


}  // namespace odc::data
