#pragma once
// The head's policy-gradient objective (train.objective grpo; kernels/policy_loss.h for the math),
// chunk by chunk inside the fused head of LlamaModel::train_microbatch. Per chunk of logits rows:
//   0. at a temperature T other than 1, the logits scaled by 1/T in place (Backend::scale);
//   1. cross_entropy without a gradient: each row's nll = -log p(target) under the current weights;
//   2. (optionally) each row's softmax entropy, a metric;
//   3. on the host: the rows' coefficients from nll, the sampling policy's log-probabilities, the
//      advantages, the reference log-probabilities and the aggregation weights;
//   4. cross_entropy again with the coefficients (divided by T) as weights, writing d loss / d logits
//      in place.
// Steps 1 and 4 are the backend's own cross-entropy; only `rows` floats cross to the host and back
// per chunk (nll down, coefficients up).
#include <cstdint>
#include <span>
#include <vector>

#include "odc/backend/backend.h"
#include "odc/kernels/policy_loss.h"
#include "odc/model/batch.h"

namespace odc::model::detail {

class PolicyHead {
 public:
  // `rows`: the batch positions the head computes (those with a loss weight), in chunk order.
  PolicyHead(const PackedBatch& batch, std::span<const std::int32_t> rows, const kernels::PolicyLossParams& params,
             bool entropy);
  // Rows [r0, r0 + count) of the head: `logits` holds their logits and receives their gradient;
  // `weights` are the rows' aggregation weights on the device; `nll` a scratch of `count` floats.
  void chunk(backend::Backend& b, backend::View logits, backend::ConstView targets, backend::ConstView weights,
             backend::View nll, backend::Buffer& coef_staging, std::int64_t r0, std::int64_t count, std::int64_t vocab);
  const kernels::PolicyLossSums& sums() const { return sums_; }
  double nll_sum() const { return nll_sum_; }

 private:
  kernels::PolicyLossParams params_;
  bool entropy_;
  std::vector<float> old_, ref_, advantages_, weights_;  // per head row
  std::vector<float> nll_, coef_, entropies_;          // one chunk's
  kernels::PolicyLossSums sums_;
  double nll_sum_ = 0.0;
};

}  // namespace odc::model::detail
