#include "odc/model/batch.h"

#include <algorithm>

#include "odc/core/error.h"

namespace odc::model {

std::int32_t PackedBatch::max_seqlen() const {
  std::int32_t longest = 0;
  for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    longest = std::max(longest, cu_seqlens[s + 1] - cu_seqlens[s]);
  }
  return longest;
}

double PackedBatch::causal_pairs() const {
  if (context.active()) return split_causal_pairs(context);
  double pairs = 0.0;
  for (std::size_t s = 0; s + 1 < cu_seqlens.size(); ++s) {
    const auto length = static_cast<double>(cu_seqlens[s + 1] - cu_seqlens[s]);
    pairs += length * (length + 1.0) / 2.0;
  }
  return pairs;
}

void PackedBatch::append(const std::int32_t* seq_tokens, const std::uint8_t* target_mask,
                         std::int64_t length, float weight) {
  ODC_CHECK(length > 0, "empty sequence appended to a batch");
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  for (std::int64_t i = 0; i < length; ++i) {
    tokens.push_back(seq_tokens[i]);
    positions.push_back(static_cast<std::int32_t>(i));
    const bool predicts = i + 1 < length && (target_mask == nullptr || target_mask[i + 1] != 0);
    targets.push_back(i + 1 < length ? seq_tokens[i + 1] : 0);
    loss_weights.push_back(predicts ? weight : 0.0f);
  }
  cu_seqlens.push_back(static_cast<std::int32_t>(tokens.size()));
}

void PackedBatch::append_policy(std::span<const float> old, std::span<const float> ref, float advantage) {
  ODC_CHECK(cu_seqlens.size() >= 2, "append_policy before any sequence");
  const auto begin = static_cast<std::size_t>(cu_seqlens[cu_seqlens.size() - 2]);
  const auto length = static_cast<std::size_t>(cu_seqlens.back()) - begin;
  ODC_CHECK(old.size() == length && (ref.empty() || ref.size() == length),
            "append_policy: {} old and {} reference log-probabilities for a sequence of {} tokens", old.size(),
            ref.size(), length);
  ODC_CHECK(advantages.size() == begin && old_logprobs.size() == begin && (ref.empty() || ref_logprobs.size() == begin),
            "append_policy: every sequence of a batch needs its policy inputs (and reference log-probabilities on all or none)");
  for (std::size_t i = 0; i < length; ++i) {
    // Position i predicts token i + 1 (its target); the last position predicts nothing.
    const bool last = i + 1 == length;
    old_logprobs.push_back(last ? 0.0f : old[i + 1]);
    if (!ref.empty()) ref_logprobs.push_back(last ? 0.0f : ref[i + 1]);
    advantages.push_back(advantage);
  }
}

void PackedBatch::append_rows(const PackedBatch& whole, std::int64_t begin, std::int64_t end) {
  ODC_CHECK(whole.num_seqs() == 1 && begin >= 0 && begin <= end && end <= whole.num_tokens(),
            "append_rows: positions [{}, {}) of a batch of {} sequences and {} tokens", begin, end, whole.num_seqs(),
            whole.num_tokens());
  ODC_CHECK(whole.has_policy() == has_policy() || cu_seqlens.size() <= 1,
            "append_rows: every sequence of a batch needs its policy inputs or none does");
  if (cu_seqlens.empty()) cu_seqlens.push_back(0);
  const auto copy = [&](const auto& from, auto& to) {
    if (from.empty()) return;
    to.insert(to.end(), from.begin() + begin, from.begin() + end);
  };
  copy(whole.tokens, tokens);
  copy(whole.positions, positions);
  copy(whole.targets, targets);
  copy(whole.loss_weights, loss_weights);
  copy(whole.old_logprobs, old_logprobs);
  copy(whole.ref_logprobs, ref_logprobs);
  copy(whole.advantages, advantages);
  cu_seqlens.push_back(static_cast<std::int32_t>(tokens.size()));
}

void PackedBatch::append_share(const PackedBatch& whole, int k, int member) {
  const ContextCut cut{whole.num_tokens(), k};
  ODC_CHECK(k >= 1 && member >= 0 && member < k, "append_share: member {} of {}", member, k);
  for (const int c : cut.chunks_of(member)) append_rows(whole, cut.chunk_begin(c), cut.chunk_begin(c + 1));
  context.lengths.push_back(whole.num_tokens());
}

void PackedBatch::clear() {
  context = ContextSplit{};
  tokens.clear();
  positions.clear();
  cu_seqlens.clear();
  targets.clear();
  loss_weights.clear();
  old_logprobs.clear();
  ref_logprobs.clear();
  advantages.clear();
}

}  // namespace odc::model
