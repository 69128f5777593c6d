#pragma once
// CUDA kernels of the clipped policy objective (policy_loss.h for the math; built when the CUDA
// backend is): the rows' softmax entropies over bf16 logits and the rows' coefficients with their
// sums, kept in a small device accumulator across chunks so that a head reads them once. Device
// pointers; `stream` is a cudaStream_t; every launch is asynchronous.
//
// Determinism: the sums are reduced over a fixed grid in a fixed order with no atomics (per-block
// partials, then one block), so they depend only on the input values and the row counts.
#include <cstdint>

#include "odc/kernels/policy_loss.h"

namespace odc::kernels::cuda {

// The device accumulator: kPolicySumFields doubles, PolicyLossSums' fields in this order. All
// zeros (a zero-filled allocation, or after reading) is the empty accumulator; ratio_min and
// ratio_max hold a value only once tokens > 0.
enum PolicySumField : int {
  kPolicyLoss,
  kPolicyTokens,
  kPolicyKl,
  kPolicyRatio,
  kPolicyRatioMin,
  kPolicyRatioMax,
  kPolicyClippedLow,
  kPolicyClippedHigh,
  kPolicyEntropy,
  kPolicyNll,
  kPolicySumFields
};

// Adds an accumulator's contents, read back to the host, into `sums`.
inline void add_policy_sums(const double* accumulator, PolicyLossSums& sums) {
  PolicyLossSums read;
  read.loss = accumulator[kPolicyLoss];
  read.tokens = accumulator[kPolicyTokens];
  read.kl = accumulator[kPolicyKl];
  read.ratio = accumulator[kPolicyRatio];
  if (read.tokens > 0) {  // else the empty range (+inf, -inf) of a default PolicyLossSums
    read.ratio_min = accumulator[kPolicyRatioMin];
    read.ratio_max = accumulator[kPolicyRatioMax];
  }
  read.clipped_low = accumulator[kPolicyClippedLow];
  read.clipped_high = accumulator[kPolicyClippedHigh];
  read.entropy = accumulator[kPolicyEntropy];
  read.nll = accumulator[kPolicyNll];
  sums.add(read);
}

// out[r] = the entropy of softmax(logits[r, :]) for `rows` bf16 rows of `vocab` (fp32 out; the
// exponentials in fp32, their sums in double; cpu::row_entropy's math).
void row_entropy(const std::uint16_t* logits, std::int64_t rows, std::int64_t vocab, float* out, void* stream);

// Scratch doubles policy_coefficients needs (the per-block partials of its fixed grid).
std::int64_t policy_coefficients_scratch();

// cpu::policy_coefficients on fp32 device arrays: coef[r] for `rows` rows (ref_logp and entropy
// may be null, as there), and the rows' sums added into `accumulator` (kPolicySumFields doubles)
// instead of a PolicyLossSums. The coefficients are the CPU kernel's double operations in its
// order (no fused multiply-adds), rounded alike; only the device's exp (1 ulp, CUDA's math
// library) can differ from the host's.
void policy_coefficients(const float* nll, const float* old_logp, const float* advantages, const float* ref_logp,
                         const float* weights, const float* entropy, std::int64_t rows, const PolicyLossParams& params,
                         float* coef, double* scratch, double* accumulator, void* stream);

}  // namespace odc::kernels::cuda
