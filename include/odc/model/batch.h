#pragma once
// A packed microbatch: sequences concatenated into one row of tokens. Position ids restart at 0
// for each sequence; attention never crosses a sequence boundary (cu_seqlens). targets[t] is the
// token that position t predicts (the next token of the same sequence) and loss_weights[t] its
// weight in the loss (0 = not a prediction: last token of a sequence or masked out).
#include <cstdint>
#include <span>
#include <vector>

#include "odc/model/context_split.h"

namespace odc::model {

struct PackedBatch {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;
  std::vector<std::int32_t> cu_seqlens;  // num_seqs + 1 entries
  std::vector<std::int32_t> targets;
  std::vector<float> loss_weights;
  // Policy-gradient inputs (train.objective grpo; empty otherwise), aligned with targets: at
  // position t, the values of the token targets[t] (the sampling policy's log-probability, the
  // reference policy's, which may stay empty without a KL penalty) and the sequence's advantage.
  std::vector<float> old_logprobs;
  std::vector<float> ref_logprobs;
  std::vector<float> advantages;
  // Context parallelism (context_split.h): when active, the batch is this member's share of the
  // split sequences — per sequence its two chunks, each a segment, positions continued — and its
  // attention gathers the group's keys and values through the model's ContextExchange.
  ContextSplit context;

  std::int64_t num_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
  int num_seqs() const { return cu_seqlens.empty() ? 0 : static_cast<int>(cu_seqlens.size()) - 1; }
  std::int32_t max_seqlen() const;
  // Causal (query, key <= query) pairs inside the sequences: sum of s(s+1)/2. Attention's work.
  double causal_pairs() const;
  // Appends one sequence; `target_mask[i] != 0` means token i is a prediction target (it is
  // predicted from position i-1), and `weight` is the loss weight of each such target.
  void append(const std::int32_t* tokens, const std::uint8_t* target_mask, std::int64_t length,
              float weight);
  // The policy inputs of the sequence appended last (append first): per token of that sequence,
  // the log-probabilities with which token i was sampled (read where it is a target; ref may be
  // empty), and the sequence's advantage.
  void append_policy(std::span<const float> old_logprobs, std::span<const float> ref_logprobs, float advantage);
  bool has_policy() const { return !advantages.empty(); }
  // Appends positions [begin, end) of `whole`'s only sequence (tokens, positions, targets, weights,
  // policy inputs) as one segment: a chunk of a split sequence, whose targets and weights are the
  // whole sequence's (the chunk's last token predicts the next chunk's first).
  void append_rows(const PackedBatch& whole, std::int64_t begin, std::int64_t end);
  // Appends member `member`'s share of `whole`'s only sequence cut for `k` members (its two chunks,
  // ContextCut) and adds the sequence's length to context.lengths (the caller sets the group).
  void append_share(const PackedBatch& whole, int k, int member);
  void clear();
};

}  // namespace odc::model
