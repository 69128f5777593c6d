#pragma once
// The paper's reference implementation's packing, as it packs (its `packing.py`, described in
// ../shared/PAPER.md section 2.2): the simulator's paper baseline (data.balance ref_lb_micro,
// ref_lb_mini), and a candidate our LB-Micro and LB-Mini evaluate so that they never plan a
// minibatch worse than the reference would.
//
//   partition: Karmarkar-Karp largest differencing into k parts (equal_size: the items sorted by
//     increasing cost taken k at a time, one per part), ties as the reference breaks them (items by
//     (cost, index); a tuple's subsets by decreasing cost, then first item; tuples of equal spread
//     oldest first; a merge unites the first tuple's i-th subset with the second's (k-1-i)-th),
//     then a local search: the parts ordered by cost, the pairs (costliest, each other) and (each
//     other, cheapest) tried in turn, and in the first pair that has one, the single-item swap with
//     the largest cost difference d, 0 < d <= gap / 2 (first by item index on a tie), until none
//     applies or 10 x (items + parts) swaps were made.
//   same_micro (DynamicSameMicro, LB-Micro): an equal-count partition over the ranks; a common
//     microbatch count from the largest over ranks of min(sequences, ceil(tokens / cap)), raised
//     by one while any rank's cost partition into that many overfills a microbatch in tokens (or
//     until it reaches the sequences per rank).
//   diff_micro (DynamicDiffMicro, LB-Mini): a free-count partition over the ranks; when the
//     minibatch divides evenly, the equal-count one too, kept if its max - min spread is smaller
//     (ReferenceSplit::spread; the quirk: a spread, not the makespan the minibatch barrier pays)
//     or, behind ReferenceSplit::makespan, if its packed ODC makespan is lower; then each rank its
//     own smallest count from min(sequences, ceil(tokens / cap)) whose cost partition respects the
//     cap.
// Microbatches by decreasing cost; empty parts dropped. The reference never sees the cost per
// microbatch (CostModel::per_microbatch): only the makespan choice and the plan's measures use it.
#include <cstdint>
#include <vector>

#include "odc/data/planner.h"

namespace odc::data {

enum class ReferencePacking { same_micro, diff_micro };

// The reference's partition of `items` (global indices, ascending) into k parts by `costs`
// (indexed by global index, all > 0), each part ascending, in the reference's part order (by
// decreasing cost).
std::vector<std::vector<std::int64_t>> reference_partition(const std::vector<double>& costs,
                                                           const std::vector<std::int64_t>& items, std::size_t k,
                                                           bool equal_size);

// The reference's plan of a minibatch that make_plan has validated (same_micro needs it to divide
// evenly over the ranks); `costs` = input.cost.cost(length) per sequence. group_of_rank is not
// consulted: the reference's common count is the whole world's (an all-reduce with MAX).
// odc::Error for a cost that is not > 0 (the reference's tie order assumes positive costs).
Plan reference_plan(const PlanInput& input, const std::vector<double>& costs, ReferencePacking packing,
                    ReferenceSplit split);

}  // namespace odc::data
