#pragma once
// The clipped policy-gradient objective of GRPO-style RL (PPO's surrogate over per-token
// log-probabilities), per row of a head chunk, given each row's negative log-probability of its
// target under the current weights (the cross-entropy kernel's nll).
//
// For a row with aggregation weight w (0: not a response token), advantage A, the sampling
// policy's log-probability old and, with a KL penalty, the reference policy's ref:
//   logp = -nll,  r = exp(logp - old),  r_c = clamp(r, 1 - clip_low, 1 + clip_high)
//   k3   = exp(ref - logp) - (ref - logp) - 1                       (the KL estimator)
//   kl   = r * k3 with kl_ratio_weighted (the importance-weighted, unbiased reverse-KL gradient of
//          DeepSeek-V3.2; TRL's use_bias_correction_kl, its default), else k3
//   loss = w * ( -min(r A, r_c A) + kl_beta * kl )
// and its derivative by logp gives the row's coefficient for the cross-entropy backward:
//   coef = -w * d loss / d logp = w * ( r A [r A <= r_c A] - kl_beta * d kl / d logp ),
//   d k3 / d logp = 1 - exp(ref - logp),  d (r k3) / d logp = r (k3 + 1 - exp(ref - logp))
// so that weight = coef in cross_entropy yields coef * (softmax - onehot) = d loss / d logits.
// (Where r A = r_c A, r lies inside the clip range and both branches have the slope r A.)
#include <cstdint>
#include <limits>

namespace odc::kernels {

struct PolicyLossParams {
  double clip_low = 0.2;   // epsilon (the ratio's lower bound is 1 - clip_low)
  double clip_high = 0.2;  // epsilon_high (upper bound 1 + clip_high)
  double kl_beta = 0.0;    // weight of the KL penalty to the reference policy (0: none)
  bool kl_ratio_weighted = true;  // the penalty's k3 times the ratio r (rl.kl_ratio_weighted)
  // The head's softmax temperature (rl.temperature): log p, entropy and the gradient are those of
  // softmax(logits / temperature), as the rollouts were sampled (model/policy_head.h applies it;
  // the coefficients here see only nll at that temperature).
  double temperature = 1.0;
};

// Sums over the rows with weight != 0 (added to, so chunks and microbatches accumulate).
struct PolicyLossSums {
  double loss = 0.0;          // sum of w * loss (the objective's value)
  double tokens = 0.0;        // response tokens
  double kl = 0.0;            // sum of the KL term kl (above; computed whenever ref is given, even at kl_beta 0)
  double ratio = 0.0;         // sum of r
  double ratio_min = std::numeric_limits<double>::infinity();
  double ratio_max = -std::numeric_limits<double>::infinity();
  double clipped_low = 0.0;   // rows with r < 1 - clip_low and A < 0 (their gradient is cut)
  double clipped_high = 0.0;  // rows with r > 1 + clip_high and A > 0
  double entropy = 0.0;       // sum of the rows' softmax entropies (when the entropies are given)
  double nll = 0.0;           // sum of the rows' nll (-log p of the target at the temperature)

  void add(const PolicyLossSums& other);
};

namespace cpu {

// One coefficient per row (see above), divided by params.temperature (the gradient by the raw
// logits: coef is rounded to float, then divided in double and rounded again); ref may be null
// when kl_beta == 0, entropy null when not measured. Rows are independent and the sums are added
// in row order (run to run the same).
void policy_coefficients(const float* nll, const float* old_logp, const float* advantages, const float* ref_logp,
                         const float* weights, const float* entropy, std::int64_t rows, const PolicyLossParams& params,
                         float* coef, PolicyLossSums& sums);

// Entropy of softmax(logits[r, :]) per row, -sum p log p = logsumexp - sum p z, in double per row.
void row_entropy(const float* logits, std::int64_t rows, std::int64_t vocab, float* out);

}  // namespace cpu
}  // namespace odc::kernels
