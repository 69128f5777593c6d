// The cost models the planner balances (linear, quadratic, flops) and the least-squares fit of the
// quadratic one to measured timings (odc-train --calibrate-cost).
#include "odc/data/cost_model.h"

#include <algorithm>
#include <cmath>

#include "odc/core/error.h"

namespace odc::data {

CostModel CostModel::linear() { return CostModel{"linear", 0.0, 1.0, 0.0, {}, {}}; }

CostModel CostModel::measured(const std::vector<std::int64_t>& lengths, const std::vector<double>& seconds) {
  if (lengths.size() != seconds.size()) {
    fail("measured cost model: {} lengths but {} timings; expected one timing per length", lengths.size(),
         seconds.size());
  }
  if (lengths.size() < 2) fail("measured cost model needs at least 2 (length, seconds) points, got {}", lengths.size());
  CostModel model{"measured", 0.0, 1.0, 0.0, {}, {}};
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || (i > 0 && lengths[i] <= lengths[i - 1])) {
      fail("measured cost model: point {} has length {}; lengths must be >= 1 and increasing", i, lengths[i]);
    }
    if (!std::isfinite(seconds[i]) || seconds[i] <= 0.0) {
      fail("measured cost model: point {} (length {}) has {} seconds; expected a finite time > 0", i, lengths[i],
           seconds[i]);
    }
  }
  const double unit = seconds[0] / static_cast<double>(lengths[0]);
  model.lengths = lengths;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    model.per_token.push_back(seconds[i] / static_cast<double>(lengths[i]) / unit);
  }
  return model;
}

double CostModel::measured_per_token(std::int64_t length) const {
  ODC_CHECK(lengths.size() >= 2 && per_token.size() == lengths.size(), "measured cost model without points");
  if (length <= lengths.front()) return per_token.front();
  std::size_t hi = 1;
  while (hi + 1 < lengths.size() && lengths[hi] < length) ++hi;
  const double x0 = static_cast<double>(lengths[hi - 1]), x1 = static_cast<double>(lengths[hi]);
  const double y0 = per_token[hi - 1], y1 = per_token[hi];
  // Beyond the last point: the last segment continued, never below its end.
  const double y = y0 + (y1 - y0) * (static_cast<double>(length) - x0) / (x1 - x0);
  return length > lengths.back() ? std::max(y, y1) : y;
}

CostModel CostModel::quadratic(double a, double b) {
  if (!std::isfinite(a) || !std::isfinite(b) || a < 0.0 || b < 0.0 || (a == 0.0 && b == 0.0)) {
    fail("quadratic cost model needs finite a, b >= 0, not both 0; got a = {}, b = {}", a, b);
  }
  return CostModel{"quadratic", a, b, 0.0, {}, {}};
}

// Training FLOPs of one sequence of s tokens (model FLOPs, as in MFU; forward + backward):
//   Linear layers: a matmul with an in x out weight costs 2*in*out FLOPs per token forward
//     (multiply + add) and 4*in*out backward (input gradient and weight gradient), so
//     linear_flops_per_token = 6 * P, with P = all matmul weights (q, k, v, o, gate, up, down of
//     every layer and the LM head; the embedding lookup is no matmul).
//   Causal attention, per layer: query i attends to the keys j <= i, s(s+1)/2 pairs. Each pair
//   costs
//     2*q_dim for its score (q_i . k_j summed over all query heads; with GQA each query head still
//     does its own dot product) and 2*q_dim for its share of P.V: 4*q_dim forward. Backward does
//     dP = dO.V^T, dV = P^T.dO, dQ = dS.K, dK = dS^T.Q: 8*q_dim. So attention_flops_per_pair =
//     12 * q_dim * layers (softmax and flash-attention's recomputation not counted).
//   Total: linear*s + pair*s(s+1)/2 = (pair/2)*s^2 + (linear + pair/2)*s. Dividing by `linear`
//   (only ratios matter to the planner) gives a = pair/(2*linear), b = 1 + pair/(2*linear), so a
//   short sequence costs about its token count. E.g. a 7B LLaMA (P ~ 6.5e9, q_dim 4096, 32 layers):
//   a ~ 1.2e-4 per token^2, attention equals the linear cost at s ~ 8K tokens.
CostModel CostModel::flops(double linear_flops_per_token, double attention_flops_per_pair) {
  if (!std::isfinite(linear_flops_per_token) || linear_flops_per_token <= 0.0 ||
      !std::isfinite(attention_flops_per_pair) || attention_flops_per_pair < 0.0) {
    fail(
        "flops cost model needs linear FLOPs per token > 0 and attention FLOPs per pair >= 0; "
        "got {} and {}",
        linear_flops_per_token, attention_flops_per_pair);
  }
  const double half_ratio = attention_flops_per_pair / (2.0 * linear_flops_per_token);
  return CostModel{"flops", half_ratio, 1.0 + half_ratio, 0.0, {}, {}};
}

// Minimizes sum (a*s^2 + b*s - y)^2 subject to a, b >= 0. With u = s / s_max (for conditioning:
// s^4 of 64K-token sequences is 1.8e19) the unconstrained optimum solves the 2x2 normal equations
// [Su4 Su3; Su3 Su2] [a'; b'] = [Su2y; Suy]. If a coefficient comes out negative, the constrained
// optimum lies on that boundary: clamp it to 0 and refit the other alone (1-D least squares).
CostModel fit_quadratic(const std::vector<std::int64_t>& lengths,
                        const std::vector<double>& seconds) {
  if (lengths.size() != seconds.size()) {
    fail("fit_quadratic: {} lengths but {} timings; expected one timing per length", lengths.size(),
         seconds.size());
  }
  std::int64_t longest = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1) fail("fit_quadratic: point {} has length {}; expected >= 1", i, lengths[i]);
    if (!std::isfinite(seconds[i])) fail("fit_quadratic: point {} has time {}", i, seconds[i]);
    longest = std::max(longest, lengths[i]);
  }
  std::vector<std::int64_t> distinct = lengths;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  if (distinct.size() < 2) {
    fail("fit_quadratic: needs timings at >= 2 distinct lengths to separate a*s^2 from b*s; got {}",
         distinct.size());
  }
  const auto scale = static_cast<double>(longest);
  double su2 = 0, su3 = 0, su4 = 0, su2y = 0, suy = 0;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    const double u = static_cast<double>(lengths[i]) / scale;
    su2 += u * u;
    su3 += u * u * u;
    su4 += u * u * u * u;
    suy += u * seconds[i];
    su2y += u * u * seconds[i];
  }
  const double det = su4 * su2 - su3 * su3;  // > 0 by Cauchy-Schwarz with 2 distinct lengths
  double a = (su2y * su2 - suy * su3) / det;
  double b = (su4 * suy - su3 * su2y) / det;
  if (a < 0.0) {
    a = 0.0;
    b = std::max(suy / su2, 0.0);
  } else if (b < 0.0) {
    b = 0.0;
    a = std::max(su2y / su4, 0.0);
  }
  if (!(a > 0.0) && !(b > 0.0)) {
    fail(
        "fit_quadratic: no positive cost fits the timings (best fit a = b = 0); are the times "
        "positive?");
  }
  return CostModel{"quadratic", a / (scale * scale), b / scale, 0.0, {}, {}};
}

}  // namespace odc::data
