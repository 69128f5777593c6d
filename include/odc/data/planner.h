#pragma once
// Planner: splits one global minibatch over the ranks and packs each rank's share into
// microbatches under a token cap. Deterministic and communication-free: every rank computes the
// same plan from the same input, and learns every other rank's share.
//
//   local_sort : round-robin (rank r gets items r, r+N, ...), sorted by decreasing length, one
//                sequence per microbatch (the paper's LocalSort).
//   lb_micro   : Karmarkar-Karp (largest differencing) split into N parts with EQUAL sequence counts
//                (or a longest-first greedy split when that starts better), swap refinement; per
//                rank the smallest microbatch count that respects the cap;
//                the maximum of those counts is used by every rank (collectives need equal counts);
//                a rank's sequences are KK-partitioned by cost into that many microbatches (growing
//                the count while any microbatch exceeds the cap); microbatches sorted by decreasing
//                cost.
//   lb_mini    : as lb_micro but balancing TOTAL cost per rank (counts may differ) and each rank
//                keeps its own minimal microbatch count (ODC only: ranks run different counts).
// By construction, the largest per-rank cost satisfies lb_mini <= lb_micro <= local_sort: lb_micro
// also tries the round-robin split and lb_mini also tries lb_micro's split, keeping the better.
#include <cstdint>
#include <string>
#include <vector>

namespace odc::data {

enum class Balance { local_sort, lb_micro, lb_mini };
Balance parse_balance(const std::string& name);  // "local_sort" | "lb_micro" | "lb_mini", else odc::Error
std::string balance_name(Balance balance);

// Cost of one sequence of length s: a*s^2 + b*s. linear: (0, 1); quadratic: fitted or given;
// flops: from the model shape (linear layers + causal attention), see planner.cpp.
struct CostModel {
  std::string kind = "linear";
  double a = 0.0;
  double b = 1.0;
  double cost(std::int64_t length) const {
    const auto s = static_cast<double>(length);
    return a * s * s + b * s;
  }
  static CostModel linear();
  static CostModel quadratic(double a, double b);
  // From training FLOPs (forward + backward): linear_flops_per_token = 6 * (matmul parameters),
  // attention_flops_per_pair = 12 * q_dim * layers per causal (query, key <= query) pair; a
  // sequence of s tokens costs linear*s + pair*s(s+1)/2. Normalized by the linear term so a short
  // sequence costs about its token count. Derivation in planner.cpp.
  static CostModel flops(double linear_flops_per_token, double attention_flops_per_pair);
};

// Least-squares fit of cost = a*s^2 + b*s through measured (length, seconds) points (no intercept),
// constrained to a, b >= 0 (a negative coefficient is clamped to 0 and the other one refitted).
// odc::Error for mismatched sizes, fewer than 2 distinct lengths, or no positive coefficient.
CostModel fit_quadratic(const std::vector<std::int64_t>& lengths, const std::vector<double>& seconds);

struct PlanInput {
  std::vector<std::int64_t> lengths;  // the global minibatch, in sampler order
  int world_size = 1;
  std::int64_t token_cap = 0;         // max tokens per microbatch; every length must be <= cap
  CostModel cost;
  Balance balance = Balance::lb_mini;
};

struct RankPlan {
  std::vector<std::vector<std::int64_t>> microbatches;  // indices into PlanInput::lengths, each
                                                         // ascending; by decreasing cost
  double cost = 0.0;                                     // total cost of the rank's sequences
  std::vector<double> microbatch_costs;                  // cost of each microbatch, same order
};

struct Plan {
  std::vector<RankPlan> ranks;
  // Estimated bubble rate (idle fraction) under each comm's barrier model, from planned costs:
  //   odc:        1 - mean_d(C_d) / max_d(C_d),           C_d = sum of rank d's microbatch costs
  //   collective: 1 - sum_d C_d / (D * sum_m max_d c_{m,d})  (barrier at every microbatch; a rank
  //               without an m-th microbatch contributes 0 to it); always >= bubble_odc, since
  //               sum_m max_d c_{m,d} >= max_d sum_m c_{m,d}
  // C_d is RankPlan::cost and c_{m,d} RankPlan::microbatch_costs; an empty plan has bubble 0.
  double bubble_odc() const;
  double bubble_collective() const;
  // The planned minibatch time (in cost units) with free communication: max_d C_d under ODC (one
  // barrier), sum_m max_d c_{m,d} under collectives (a barrier per microbatch). The ratio of two
  // plans' makespans is the speedup their schedules allow: the zero-overhead bound.
  double makespan_odc() const;
  double makespan_collective() const;
  std::int64_t max_microbatches() const;
  // Fingerprint of the structure (ranks, microbatches, indices) for cross-rank comparison.
  std::uint64_t hash() const;
};

// Throws odc::Error for a sequence longer than the cap (naming length and cap), an empty
// minibatch, world_size < 1, or lb_micro when the minibatch does not divide evenly over the ranks.
Plan make_plan(const PlanInput& input);

// Building blocks (exposed for tests).
// Karmarkar-Karp largest differencing into k parts; equal_size: part sizes differ by at most one
// (and are equal when k divides n). Returns k parts of item indices (each ascending), by
// decreasing cost; costs must be finite and >= 0.
std::vector<std::vector<std::int64_t>> karmarkar_karp(const std::vector<double>& costs, int k, bool equal_size);
// Swap refinement: repeatedly tries moving/swapping single items between the most (or least)
// loaded part and another part, accepting changes that strictly shrink that pair's gap without
// inverting it (so the largest part cost never rises and the smallest never falls), until none
// applies or a work bound proportional to items + parts is reached; moves only when !equal_size,
// so part sizes are preserved when equal_size. Each part is returned ascending.
void refine_partition(const std::vector<double>& costs, std::vector<std::vector<std::int64_t>>& parts,
                      bool equal_size);

}  // namespace odc::data
