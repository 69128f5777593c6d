#pragma once
// The per-sequence cost the planner balances: a*s^2 + b*s for a sequence of s tokens, from the
// token count (linear), measured timings (quadratic, fit_quadratic) or the model's shape (flops).
#include <cstdint>
#include <string>
#include <vector>

namespace odc::data {

// Cost of one sequence of length s: a*s^2 + b*s. linear: (0, 1); quadratic: fitted or given;
// flops: from the model shape (linear layers + causal attention), see cost_model.cpp.
struct CostModel {
  std::string kind = "linear";
  double a = 0.0;
  double b = 1.0;
  // The fixed cost of running one microbatch beyond its sequences' (the reference's fit's c;
  // data.cost_c). Never part of a sequence's cost(): the planners add it per microbatch when they
  // weigh microbatch counts and splits, and the plan's makespans and bubbles count it.
  double per_microbatch = 0.0;
  // kind "measured": per-token seconds at increasing lengths (odc-train --calibrate-cost).
  std::vector<std::int64_t> lengths;
  std::vector<double> per_token;
  // Context parallelism: the exchange's cost per token of a split sequence, in cost units (keys and
  // values gathered from the group's other members and their gradients returned, per member). A
  // member of a group of k exchanges (k-1)/k of the sequence's rows, so its share costs
  // exchange_per_token * L * (k-1)/k on top of its compute (context_groups.h). Derivation, for a
  // link of B bytes/s between the members and S seconds per cost unit (the model's time per unit):
  //   per token and layer, K and V: 2 * kv_heads * head_dim * activation_bytes, moved `passes`
  //   times: the forward's gather, the backward's gather again (the model keeps one layer's
  //   gathered keys at a time), the return of their gradients, and under activation
  //   checkpointing the recomputed forward's gather (passes 4, else 3), so
  //   exchange_per_token = layers * passes * 2 * kv_heads * head_dim * bytes / B / S.
  // 0 (the default): exchanges taken as free (hidden behind attention).
  double exchange_per_token = 0.0;
  double cost(std::int64_t length) const {
    const auto s = static_cast<double>(length);
    if (!lengths.empty()) return measured_per_token(length) * s;
    return a * s * s + b * s;
  }
  // The measured model's time per token at `length`, normalized so that the shortest measured
  // length costs 1 per token: linear between neighbouring points (attention adds a per-token
  // cost that grows linearly with the length, and cache effects bend it between points), the
  // first point's value below it, and beyond the last point the last segment's slope continued.
  double measured_per_token(std::int64_t length) const;
  static CostModel linear();
  static CostModel quadratic(double a, double b);
  // From measured (length, seconds) points of one sequence per microbatch: at least 2 points,
  // lengths increasing and >= 1, seconds finite and > 0 (odc::Error naming the point otherwise).
  // Unlike the quadratic fit it follows what the machine does between the points, such as a
  // cost per token that jumps once attention's scratch outgrows a cache.
  static CostModel measured(const std::vector<std::int64_t>& lengths, const std::vector<double>& seconds);
  // From training FLOPs (forward + backward): linear_flops_per_token = 6 * (matmul parameters),
  // attention_flops_per_pair = 12 * q_dim * layers per causal (query, key <= query) pair; a
  // sequence of s tokens costs linear*s + pair*s(s+1)/2. Normalized by the linear term so a short
  // sequence costs about its token count. Derivation in cost_model.cpp.
  static CostModel flops(double linear_flops_per_token, double attention_flops_per_pair);
};

// Least-squares fit of cost = a*s^2 + b*s through measured (length, seconds) points (no intercept),
// constrained to a, b >= 0 (a negative coefficient is clamped to 0 and the other one refitted).
// odc::Error for mismatched sizes, fewer than 2 distinct lengths, or no positive coefficient.
CostModel fit_quadratic(const std::vector<std::int64_t>& lengths, const std::vector<double>& seconds);

}  // namespace odc::data
