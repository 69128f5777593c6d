#include "policy_head.h"

#include "odc/core/error.h"

namespace odc::model::detail {

PolicyHead::PolicyHead(const PackedBatch& batch, std::span<const std::int32_t> rows,
                       const kernels::PolicyLossParams& params, bool entropy)
    : params_(params), entropy_(entropy) {
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
  const bool with_ref = !batch.ref_logprobs.empty();
  for (const auto t32 : rows) {
    const auto t = static_cast<std::size_t>(t32);
    old_.push_back(batch.old_logprobs[t]);
    advantages_.push_back(batch.advantages[t]);
    weights_.push_back(batch.loss_weights[t]);
    if (with_ref) ref_.push_back(batch.ref_logprobs[t]);
  }
}

void PolicyHead::chunk(backend::Backend& b, backend::View logits, backend::ConstView targets,
                       backend::ConstView weights, backend::View nll, backend::Buffer& coef_staging, std::int64_t r0,
                       std::int64_t count, std::int64_t vocab) {
  if (count == 0) return;
  const auto begin = static_cast<std::size_t>(r0);
  const auto n = static_cast<std::size_t>(count);
  ODC_CHECK(begin + n <= weights_.size(), "policy head: rows [{}, {}) of {}", r0, r0 + count, weights_.size());
  ODC_CHECK(params_.temperature > 0, "policy head: temperature {}", params_.temperature);
  // At temperature T the head's distribution is softmax(logits / T): the logits are scaled in
  // place, and the gradient by the raw logits is 1/T times the one by the scaled logits.
  const double temperature = params_.temperature;
  if (temperature != 1.0) b.scale(logits, 1.0 / temperature);
  // The sums of these cross-entropy calls are not the objective's: kept apart and dropped.
  backend::LossSums unused;
  b.cross_entropy(logits, targets, weights, count, vocab, backend::View{}, nll, unused);
  nll_.resize(n);
  b.download(nll, nll_);
  kernels::PolicyLossSums chunk_sums;
  if (entropy_) {
    entropies_.resize(n);
    b.row_entropy(logits, count, vocab, entropies_);
  }
  coef_.resize(n);
  kernels::cpu::policy_coefficients(nll_.data(), old_.data() + begin, advantages_.data() + begin,
                                    ref_.empty() ? nullptr : ref_.data() + begin, weights_.data() + begin, count,
                                    params_, coef_.data(), chunk_sums);
  for (std::size_t i = 0; i < n; ++i) {
    if (weights_[begin + i] == 0.0f) continue;
    nll_sum_ += nll_[i];
    if (entropy_) chunk_sums.entropy += entropies_[i];
  }
  if (temperature != 1.0) {
    for (auto& c : coef_) c = static_cast<float>(c / temperature);
  }
  const backend::ConstView coef = b.upload(std::span<const float>(coef_), coef_staging);
  b.cross_entropy(logits, targets, coef, count, vocab, logits, nll, unused);
  b.resolve_loss(unused);
  sums_.add(chunk_sums);
}

}  // namespace odc::model::detail
