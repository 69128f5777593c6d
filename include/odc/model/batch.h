#pragma once
// A packed microbatch: sequences concatenated into one row of tokens. Position ids restart at 0
// for each sequence; attention never crosses a sequence boundary (cu_seqlens). targets[t] is the
// token that position t predicts (the next token of the same sequence) and loss_weights[t] its
// weight in the loss (0 = not a prediction: last token of a sequence or masked out).
#include <cstdint>
#include <vector>

namespace odc::model {

struct PackedBatch {
  std::vector<std::int32_t> tokens;
  std::vector<std::int32_t> positions;
  std::vector<std::int32_t> cu_seqlens;  // num_seqs + 1 entries
  std::vector<std::int32_t> targets;
  std::vector<float> loss_weights;

  std::int64_t num_tokens() const { return static_cast<std::int64_t>(tokens.size()); }
  int num_seqs() const { return cu_seqlens.empty() ? 0 : static_cast<int>(cu_seqlens.size()) - 1; }
  std::int32_t max_seqlen() const;
  // Causal (query, key <= query) pairs inside the sequences: sum of s(s+1)/2. Attention's work.
  double causal_pairs() const;
  // Appends one sequence; `target_mask[i] != 0` means token i is a prediction target (it is
  // predicted from position i-1), and `weight` is the loss weight of each such target.
  void append(const std::int32_t* tokens, const std::uint8_t* target_mask, std::int64_t length,
              float weight);
};

}  // namespace odc::model
