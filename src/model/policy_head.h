#pragma once
// The head's policy-gradient objective (train.objective grpo; kernels/policy_loss.h for the math),
// chunk by chunk inside the fused head of LlamaModel::train_microbatch. The head rows' sampling
// and reference log-probabilities and advantages are uploaded once per head; per chunk of logits
// rows, all on the backend:
//   0. at a temperature T other than 1, the logits scaled by 1/T in place (Backend::scale);
//   1. cross_entropy without a gradient: each row's nll = -log p(target) under the current weights;
//   2. (optionally) each row's softmax entropy, a metric (Backend::row_entropy);
//   3. the rows' coefficients (divided by T) and sums (Backend::policy_coefficients);
//   4. cross_entropy again with the coefficients as weights, writing d loss / d logits in place.
// Nothing crosses to the host per chunk: the sums are read once, at finish().
#include <cstdint>
#include <span>
#include <vector>

#include "decoder_layer.h"
#include "odc/backend/backend.h"
#include "odc/kernels/policy_loss.h"
#include "odc/model/batch.h"

namespace odc::model::detail {

class PolicyHead {
 public:
  // `rows`: the batch positions the head computes (those with a loss weight), in chunk order. The
  // rows' inputs go to the backend here, into `s`'s policy buffers.
  PolicyHead(backend::Backend& b, const PackedBatch& batch, std::span<const std::int32_t> rows,
             const kernels::PolicyLossParams& params, bool entropy, Scratch& s);
  // Rows [r0, r0 + count) of the head: `logits` holds their logits and receives their gradient;
  // `weights` are the rows' aggregation weights on the device; `nll` a scratch of `count` floats.
  void chunk(backend::View logits, backend::ConstView targets, backend::ConstView weights, backend::View nll,
             std::int64_t r0, std::int64_t count, std::int64_t vocab);
  // The objective's sums over every chunk (one read from the backend).
  const kernels::PolicyLossSums& finish();

 private:
  backend::Backend& b_;
  Scratch& s_;
  kernels::PolicyLossParams params_;
  bool entropy_;
  // Per head row: the uploads' host data, which a host backend's views point into (an upload is
  // valid while its source lives), and the views in the backend's memory.
  std::vector<float> old_host_, ref_host_, advantages_host_;
  backend::ConstView old_, ref_, advantages_;
  kernels::PolicyLossSums sums_;
};

}  // namespace odc::model::detail
