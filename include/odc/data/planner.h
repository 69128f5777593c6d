#pragma once
// Planner: splits one global minibatch over the ranks and packs each rank's share into
// microbatches under a token cap. Deterministic and communication-free: every rank computes the
// same plan from the same input, and learns every other rank's share.
//
//   local_sort : round-robin (rank r gets items r, r+N, ...), sorted by decreasing length, one
//                sequence per microbatch (the paper's LocalSort).
//   lb_micro   : Karmarkar-Karp (largest differencing) split into N parts with EQUAL sequence counts
//                (or a longest-first greedy split when that starts better), swap refinement; per
//                rank the smallest microbatch count whose cost-balanced split (KK, refined)
//                respects the cap; the maximum of those counts is used by every rank of a
//                collective group (collectives need equal counts): a rank with fewer gets its KK
//                split into that many if it fits, else its own microbatches split up (the
//                costliest halved by a 2-way KK) until it has that many. For one group, the
//                reference's common count (the smallest at which every rank's balanced split fits)
//                is kept instead when it needs no more microbatches and its barrier schedule is
//                faster, and so are plain (unrefined) microbatch splits; then sequences move to
//                earlier microbatches of their rank that stay within that step's slowest
//                microbatch (align_to_steps: the collective makespan never grows). Microbatches
//                sorted by decreasing cost.
//   lb_mini    : as lb_micro but balancing TOTAL cost per rank (counts may differ) and each rank
//                keeps its own minimal microbatch count (ODC only: ranks run different counts).
//   lb_mini_equal: LB-Mini constrained to equal sequence counts per rank (what RL frameworks such
//                as verl require): lb_micro's equal-count split, but each rank keeps its own
//                minimal microbatch count, no common count (ODC only: ranks run different counts).
//                Like lb_micro it needs the global minibatch to divide evenly over the ranks.
//   round_robin: no balancing, for ablations and tests: rank r takes items r, r+N, ... and packs
//                them in order under the cap (pack_in_order); counts may differ (a collective
//                comm pads the short ranks with empty microbatches).
//   ref_lb_micro, ref_lb_mini: the paper's reference implementation's own packing
//                (DynamicSameMicro, DynamicDiffMicro), exactly as it packs (reference_planners.h);
//                the simulator's paper baseline. ref_lb_mini: ODC only, like lb_mini.
// By construction, the largest per-rank cost satisfies lb_mini <= lb_micro <= local_sort: lb_micro
// also tries the round-robin split and lb_mini also tries lb_micro's split, keeping the better
// (lb_micro <= local_sort for its own split: where it keeps the reference's plan, chosen by the
// barrier schedule's makespan, the largest per-rank cost is not compared).
// And never worse than the reference: lb_mini also evaluates ref_lb_mini's plan and lb_micro
// ref_lb_micro's (aligned to the steps; for one collective group, and with a cost per microbatch
// or no more microbatches than its own), keeping the reference's where its makespan with the
// per-microbatch cost (ODC's for lb_mini, the barrier schedule's for lb_micro) is shorter by more
// than rounding (1e-12 relative). lb_mini_equal takes the split lb_micro ends with.
// lb_mini_equal uses lb_micro's split, so its per-rank costs (and their max) equal lb_micro's; only
// the microbatch counts differ.
//
// Context parallelism (context_groups.h: the share of a split sequence, its cost): a sequence too
// long for one rank's token cap is split over a group of ranks. Dynamic (ODC; PlanInput::
// context_dynamic): only those sequences, each over a group chosen for this minibatch, the groups
// run first (Plan::groups), the other sequences balanced around them. Static (collective;
// PlanInput::context_degree): every sequence over fixed groups of consecutive ranks.
//
// The cost model lives in cost_model.h and the partitioning building blocks in partition.h; this
// header includes both, so it is the one to include for planning.
#include <cstdint>
#include <string>
#include <vector>

#include "odc/data/cost_model.h"
#include "odc/data/partition.h"

namespace odc::data {

enum class Balance { local_sort, lb_micro, lb_mini, round_robin, lb_mini_equal, ref_lb_micro, ref_lb_mini };
// "local_sort" | "lb_micro" | "lb_mini" | "round_robin" | "lb_mini_equal" | "ref_lb_micro" |
// "ref_lb_mini", else odc::Error
Balance parse_balance(const std::string& name);
std::string balance_name(Balance balance);

// How ref_lb_mini chooses between its two rank splits (free counts, and equal counts when the
// minibatch divides evenly): spread = the smaller max - min rank cost, as the reference does
// (DynamicDiffMicro); makespan = the lower ODC makespan once packed, per-microbatch cost included.
enum class ReferenceSplit { spread, makespan };

struct PlanInput {
  std::vector<std::int64_t> lengths;  // the global minibatch, in sampler order
  int world_size = 1;
  std::int64_t token_cap = 0;         // max tokens per microbatch; every length must be <= cap
  CostModel cost;
  Balance balance = Balance::lb_mini;
  // lb_micro's equal microbatch counts hold among the ranks of one group: group_of_rank[r] names
  // rank r's (the ranks that run collectives together; hybrid sharding: a host). Empty: one group.
  std::vector<int> group_of_rank;
  ReferenceSplit reference_split = ReferenceSplit::spread;  // ref_lb_mini only
  // Context parallelism. dynamic (ODC): a sequence whose share would not fit token_cap on one rank is
  // split over a group of k ranks, k the smallest with the zig-zag share (max rows) <= token_cap, or
  // larger (up to max_context_degree) where that shortens the ODC makespan; the groups run first on
  // their members, in Plan::groups order; the other sequences are balanced around them. Balances
  // lb_mini, local_sort, round_robin (lb_micro, lb_mini_equal and the reference's: odc::Error).
  bool context_dynamic = false;
  int max_context_degree = 0;     // 0: the world
  // static (collective): every sequence split over groups of `context_degree` consecutive ranks
  // (world % degree == 0): the plan is made for world/degree ranks with their members' caps
  // combined, and every member of a group gets its group's microbatches.
  int context_degree = 1;
};

// A sequence split over a group of ranks (dynamic context parallelism): one microbatch on every
// member, run before the member's own microbatches.
struct ContextGroup {
  std::int64_t sequence = 0;   // index into PlanInput::lengths
  std::vector<int> ranks;      // the members: member i = ranks[i] (ContextCut's member i)
  double cost = 0.0;           // each member's planned cost for its share (attention pairs of its
                               // chunks against their prefixes, its rows, the exchange): the
                               // largest member's, since the members move in step at every layer
};

struct RankPlan {
  std::vector<std::vector<std::int64_t>> microbatches;  // indices into PlanInput::lengths, each
                                                         // ascending; in execution order: by
                                                         // decreasing cost (round_robin: in
                                                         // packing order)
  double cost = 0.0;                                     // total cost of the rank's sequences
                                                         // (round_robin: the sum of its
                                                         // microbatch costs, in order)
  std::vector<double> microbatch_costs;                  // cost of each microbatch, same order
  // Dynamic context parallelism: the Plan::groups this rank is a member of (indices, ascending =
  // execution order), run before `microbatches`; each is one more microbatch of the rank, and
  // `cost` includes their ContextGroup::cost (microbatches and microbatch_costs do not).
  std::vector<int> groups = {};
};

struct Plan {
  std::vector<RankPlan> ranks;
  // The cost model's fixed cost per microbatch (CostModel::per_microbatch; 0 for most models).
  double per_microbatch = 0.0;
  std::vector<ContextGroup> groups;  // dynamic: in execution order (every member runs its groups first, in this order)
  int context_degree = 1;            // static: >1 when every microbatch is split over consecutive groups of this size
  // Estimated bubble rate (idle fraction) under each comm's barrier model, from planned costs:
  //   odc:        1 - mean_d(B_d) / max_d(B_d),      B_d = C_d + n_d c, the time rank d is busy
  //   collective: 1 - sum_d B_d / (D * sum_m (c + max_d c_{m,d}))  (barrier at every microbatch; a
  //               rank without an m-th microbatch contributes 0 to it); always >= bubble_odc
  // C_d is RankPlan::cost, n_d its microbatches, c_{m,d} RankPlan::microbatch_costs and c
  // per_microbatch; an empty plan has bubble 0. With context groups (Plan::groups) the ODC makespan
  // follows the schedule instead (below) and both bubbles take S over it.
  double bubble_odc() const;
  double bubble_collective() const;
  // The planned minibatch time (in cost units) with free communication: max_d B_d under ODC (one
  // barrier), sum_m (c + max_d c_{m,d}) under collectives (a barrier per microbatch). The ratio of
  // two plans' makespans is the speedup their schedules allow: the zero-overhead bound.
  // With context groups, ODC's follows the schedule: the groups in order, each starting when its
  // last member is ready (start = max over members of their ready time) and keeping every member
  // busy for its cost + c; then each rank its own microbatches. The collective's runs the groups
  // as barrier steps of their own (sum of cost + c) before its microbatch steps.
  double makespan_odc() const;
  double makespan_collective() const;
  // B_d: the rank's sequences' cost (its group shares' included) and its microbatches' fixed cost
  // (one per group it is a member of, too).
  double busy(const RankPlan& rank) const;
  std::int64_t max_microbatches() const;  // groups counted
  // Fingerprint of the structure (ranks, microbatches, indices; the context groups and degree when
  // present) for cross-rank comparison.
  std::uint64_t hash() const;

 private:
  double bubble_of(double makespan) const;
};

// Throws odc::Error for a sequence longer than the cap (naming length and cap; with context
// parallelism: a sequence whose share over the largest group allowed is still over it, naming its
// index, length, the cap and the group size it needs), an empty minibatch, world_size < 1, or
// lb_micro / lb_mini_equal / ref_lb_micro when the minibatch does not divide evenly over the ranks
// (static context degree: over world / degree groups).
Plan make_plan(const PlanInput& input);

}  // namespace odc::data
