#include "odc/kernels/policy_loss.h"

#include <algorithm>
#include <cmath>

#include "odc/core/error.h"

namespace odc::kernels {

void PolicyLossSums::add(const PolicyLossSums& other) {
  loss += other.loss;
  tokens += other.tokens;
  kl += other.kl;
  ratio += other.ratio;
  ratio_min = std::min(ratio_min, other.ratio_min);
  ratio_max = std::max(ratio_max, other.ratio_max);
  clipped_low += other.clipped_low;
  clipped_high += other.clipped_high;
  entropy += other.entropy;
  nll += other.nll;
}

namespace cpu {

void policy_coefficients(const float* nll, const float* old_logp, const float* advantages, const float* ref_logp,
                         const float* weights, const float* entropy, std::int64_t rows, const PolicyLossParams& params,
                         float* coef, PolicyLossSums& sums) {
  ODC_CHECK(params.clip_low >= 0 && params.clip_low < 1 && params.clip_high >= 0,
            "policy_coefficients: clip range [1 - {}, 1 + {}]", params.clip_low, params.clip_high);
  ODC_CHECK(params.kl_beta == 0.0 || ref_logp != nullptr, "policy_coefficients: a KL penalty without reference log-probabilities");
  ODC_CHECK(params.temperature > 0, "policy_coefficients: temperature {}", params.temperature);
  const double low = 1.0 - params.clip_low;
  const double high = 1.0 + params.clip_high;
  for (std::int64_t r = 0; r < rows; ++r) {
    const double w = weights[r];
    if (w == 0.0) {
      coef[r] = 0.0f;
      continue;
    }
    const double logp = -static_cast<double>(nll[r]);
    const double a = advantages[r];
    const double ratio = std::exp(logp - static_cast<double>(old_logp[r]));
    const double clipped = std::clamp(ratio, low, high);
    const double unclipped_term = ratio * a;
    const double clipped_term = clipped * a;
    // -min(r A, r_c A): its slope by logp is -r A where the unclipped term is the minimum (ties:
    // r inside the range, both slopes r A), else 0 (the clamp is flat outside the range).
    const bool unclipped_min = unclipped_term <= clipped_term;
    double loss = -std::min(unclipped_term, clipped_term);
    double slope = unclipped_min ? -unclipped_term : 0.0;  // d loss / d logp
    if (ref_logp != nullptr) {
      const double d = static_cast<double>(ref_logp[r]) - logp;
      const double k3 = std::exp(d) - d - 1.0;
      const double dk3 = 1.0 - std::exp(d);  // d k3 / d logp
      const double kl = params.kl_ratio_weighted ? ratio * k3 : k3;
      sums.kl += kl;
      loss += params.kl_beta * kl;
      slope += params.kl_beta * (params.kl_ratio_weighted ? ratio * (k3 + dk3) : dk3);
    }
    coef[r] = static_cast<float>(-w * slope);
    if (params.temperature != 1.0) coef[r] = static_cast<float>(coef[r] / params.temperature);
    sums.nll += nll[r];
    if (entropy != nullptr) sums.entropy += entropy[r];
    sums.loss += w * loss;
    sums.tokens += 1.0;
    sums.ratio += ratio;
    sums.ratio_min = std::min(sums.ratio_min, ratio);
    sums.ratio_max = std::max(sums.ratio_max, ratio);
    if (ratio < low && a < 0) sums.clipped_low += 1.0;
    if (ratio > high && a > 0) sums.clipped_high += 1.0;
  }
}

void row_entropy(const float* logits, std::int64_t rows, std::int64_t vocab, float* out) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* z = logits + r * vocab;
    const double top = *std::max_element(z, z + vocab);
    double sum = 0.0, weighted = 0.0;
    for (std::int64_t i = 0; i < vocab; ++i) {
      const double shifted = static_cast<double>(z[i]) - top;
      const double e = std::exp(shifted);
      sum += e;
      weighted += e * shifted;
    }
    // H = log sum e - sum (e / sum) * shifted (the shift cancels).
    out[r] = static_cast<float>(std::log(sum) - weighted / sum);
  }
}

}  // namespace cpu
}  // namespace odc::kernels
