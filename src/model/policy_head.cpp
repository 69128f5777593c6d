#include "policy_head.h"

#include "odc/core/error.h"

namespace odc::model::detail {

PolicyHead::PolicyHead(backend::Backend& b, const PackedBatch& batch, std::span<const std::int32_t> rows,
                       const kernels::PolicyLossParams& params, bool entropy, Scratch& s)
    : b_(b), s_(s), params_(params), entropy_(entropy) {
  const auto n = batch.tokens.size();
  if (batch.advantages.size() != n || batch.old_logprobs.size() != n ||
      (!batch.ref_logprobs.empty() && batch.ref_logprobs.size() != n)) {
    fail("packed batch for the policy objective is inconsistent: {} tokens, {} advantages, {} old and {} reference "
         "log-probabilities", n, batch.advantages.size(), batch.old_logprobs.size(), batch.ref_logprobs.size());
  }
  if (params_.kl_beta != 0.0 && batch.ref_logprobs.empty()) {
    fail("the policy objective has a KL penalty (rl.kl_beta = {}) but the batch holds no reference "
         "log-probabilities", params_.kl_beta);
  }
  if (!(params_.temperature > 0)) fail("the policy objective's temperature must be positive, got {}", params_.temperature);
  const bool with_ref = !batch.ref_logprobs.empty();
  old_host_.reserve(rows.size());
  advantages_host_.reserve(rows.size());
  if (with_ref) ref_host_.reserve(rows.size());
  for (const auto t32 : rows) {
    const auto t = static_cast<std::size_t>(t32);
    old_host_.push_back(batch.old_logprobs[t]);
    advantages_host_.push_back(batch.advantages[t]);
    if (with_ref) ref_host_.push_back(batch.ref_logprobs[t]);
  }
  old_ = b.upload(std::span<const float>(old_host_), s.policy_old);
  advantages_ = b.upload(std::span<const float>(advantages_host_), s.policy_advantages);
  if (with_ref) ref_ = b.upload(std::span<const float>(ref_host_), s.policy_ref);
}

void PolicyHead::chunk(backend::View logits, backend::ConstView targets, backend::ConstView weights, backend::View nll,
                       std::int64_t r0, std::int64_t count, std::int64_t vocab) {
  if (count == 0) return;
  ODC_CHECK(r0 >= 0 && r0 + count <= old_.count, "policy head: rows [{}, {}) of {}", r0, r0 + count, old_.count);
  backend::Backend& b = b_;
  // At temperature T the head's distribution is softmax(logits / T): the logits are scaled in
  // place, and the gradient by the raw logits is 1/T times the one by the scaled logits (the
  // coefficients carry the 1/T).
  if (params_.temperature != 1.0) b.scale(logits, 1.0 / params_.temperature);
  // The sums of these cross-entropy calls are not the objective's: the model's final resolve_loss
  // collects them with nothing else in them, and the objective's sums replace them.
  backend::LossSums unused;
  b.cross_entropy(logits, targets, weights, count, vocab, backend::View{}, nll, unused);
  backend::View entropy;
  if (entropy_) {
    entropy = s_.chunk_entropy.get(count);
    b.row_entropy(logits, count, vocab, entropy);
  }
  const backend::View coef = s_.chunk_coef.get(count);
  b.policy_coefficients(nll, old_.at(r0, count), advantages_.at(r0, count),
                        ref_.empty() ? backend::ConstView{} : ref_.at(r0, count), weights, entropy, count, params_,
                        coef, sums_);
  b.cross_entropy(logits, targets, coef, count, vocab, logits, nll, unused);
}

const kernels::PolicyLossSums& PolicyHead::finish() {
  b_.resolve_policy(sums_);
  return sums_;
}

}  // namespace odc::model::detail
