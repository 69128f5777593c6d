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
  double cost(std::int64_t length) const {
    const auto s = static_cast<double>(length);
    return a * s * s + b * s;
  }
  static CostModel linear();
  static CostModel quadratic(double a, double b);
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
