#pragma once
// Private pieces of the planner (src/data/partition.cpp, microbatches.cpp, planner.cpp): the
// unchecked building blocks behind make_plan, karmarkar_karp and refine_partition.
//
// Determinism: every rank runs this code on the same input and must get a bitwise identical plan.
// So every sort uses a total order (ties broken by item or part index), no container is iterated in
// an address-dependent order, and every set's cost is summed in one canonical order (ascending item
// index, set_cost) wherever costs are compared across candidate plans.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <vector>

#include "odc/data/planner.h"

namespace odc::data::planner_detail {

using Index = std::int64_t;
using Parts = std::vector<std::vector<Index>>;

inline std::size_t as_size(Index i) { return static_cast<std::size_t>(i); }

// Cost of a set of items, summed in ascending index order so that the same set always gets the same
// double, whichever plan it appears in. `items` must be ascending.
inline double set_cost(const std::vector<double>& costs, const std::vector<Index>& items) {
  double sum = 0.0;
  for (Index i : items) sum += costs[as_size(i)];
  return sum;
}

// ---- planner.cpp ---------------------------------------------------------------------------------

// make_plan's checks (odc::Error); check_cap: every length <= the token cap (not when sequences
// are split over ranks).
void validate(const PlanInput& input, bool check_cap);
// The plan of `input` (validated) by its balance with these costs per sequence: make_plan without
// context parallelism.
Plan plan_sequences(const PlanInput& input, const std::vector<double>& costs);
// The sequences of `input` balanced around the ranks' loads (loads[r]: what rank r runs first, its
// context groups): lb_mini balances the loads plus the sequences' costs; local_sort and
// round_robin split as always. The ranks' costs are their own sequences' (loads not added).
Plan plan_around(const PlanInput& input, const std::vector<double>& costs, const std::vector<double>& loads);

// A rank's plan: its microbatches by decreasing cost (ties: smaller first index), each ascending,
// their costs, and the cost of `items` (its sequences).
RankPlan finish_rank(const std::vector<double>& costs, const std::vector<Index>& items, Parts microbatches);

// ---- context_groups.cpp --------------------------------------------------------------------------

// make_plan with dynamic context groups (PlanInput::context_dynamic) and with a static context
// degree (PlanInput::context_degree > 1).
Plan dynamic_context_plan(const PlanInput& input);
Plan static_context_plan(const PlanInput& input);

// ---- partition.cpp ------------------------------------------------------------------------------

// Karmarkar-Karp into k parts (see karmarkar_karp in partition.h), without checking the costs.
Parts karmarkar_karp_impl(const std::vector<double>& costs, std::size_t k, bool equal_size);
// Swap refinement within the work bounds (see refine_partition), without checking the parts.
// Items >= movable_below stay where they are (loaded_split's rank loads).
void refine(const std::vector<double>& costs, Parts& parts, bool equal_size,
            Index movable_below = std::numeric_limits<Index>::max());
// The items split over loads.size() ranks that start with those loads: Karmarkar-Karp seeded with
// one tuple holding every rank's load as its own subset (merges never unite two subsets of one
// tuple, so every final part holds exactly one load and is that rank's), refined without moving
// the loads. Part r is rank r's items, ascending.
Parts loaded_split(const std::vector<double>& costs, const std::vector<double>& loads);
// Rank r gets items r, r+N, ...: LocalSort's split (and round_robin's).
Parts round_robin(std::size_t n, std::size_t ranks);
// LB-Micro's split: equal counts per rank, the lowest max cost found.
Parts equal_count_split(const std::vector<double>& costs, std::size_t ranks);
// LB-Mini's split candidates: KK refined (total cost balanced, counts free), then, when the items
// divide over the ranks, equal_count_split's; and which of them to take by cost alone (the lower
// maximum part cost, so never higher than LB-Micro's; the first on a tie).
std::vector<Parts> free_count_candidates(const std::vector<double>& costs, std::size_t ranks);
std::size_t preferred_free_count(const std::vector<double>& costs, const std::vector<Parts>& candidates);

// ---- reference_partition.cpp -----------------------------------------------------------------------

// The reference's partitioning (reference_planners.h), reusable over many subsets of one
// minibatch: the scratch it needs is the minibatch's size, allocated once.
class ReferencePartitioner {
 public:
  explicit ReferencePartitioner(const std::vector<double>& costs);  // costs by item, all > 0
  // The items in the order the reference sorts them: by (cost, index).
  std::vector<Index> by_cost(std::vector<Index> items) const;
  // The reference's partition of the items (given by_cost) into k parts: by decreasing cost, each
  // ascending (empty parts last).
  Parts partition(const std::vector<Index>& by_cost, std::size_t k, bool equal_size);

 private:
  const std::vector<double>& costs_;
  std::vector<Index> next_;            // Karmarkar-Karp's item lists
  std::vector<std::size_t> part_of_;   // the swap search's part of each item
};

// ---- microbatches.cpp ---------------------------------------------------------------------------

// The sequences of one rank, as global indices (ascending), and what packing needs of them.
struct RankItems {
  const std::vector<Index>& items;
  const std::vector<std::int64_t>& lengths;
  const std::vector<double>& costs;
  std::int64_t cap;

  std::int64_t tokens(const std::vector<Index>& microbatch) const;
  bool fits(const Parts& microbatches) const;
  // KK by cost over the given global indices into m parts, refined (refine) unless !refined;
  // empty parts dropped.
  Parts kk(const std::vector<Index>& subset, std::size_t m, bool refined = true) const;
};

// The rank's sequences in the fewest microbatches found that respect the cap (the refined KK split
// at each count tried, else the plain one; with !refined the plain one only).
Parts minimal_microbatches(const RankItems& rank, bool refined = true);
// Exactly m microbatches under the cap, given the rank's minimal packing (m between its size and
// the number of sequences).
Parts exact_microbatches(const RankItems& rank, std::size_t m, Parts minimal);
// The reference's common count: the smallest m, from the largest of the ranks' token bounds, at
// which every rank's cost-balanced split into exactly m microbatches respects the cap (a bounded
// number of counts tried); empty when none was found.
std::vector<Parts> common_count_microbatches(const std::vector<RankItems>& ranks);
// In the items' order, each microbatch filled until the next sequence would exceed the cap
// (pack_in_order): round_robin's packing, no balancing.
Parts in_order_microbatches(const RankItems& rank);

}  // namespace odc::data::planner_detail
