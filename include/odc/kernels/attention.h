#pragma once
// Causal scaled-dot-product attention over packed variable-length sequences with grouped-query
// heads. Tokens of all sequences are concatenated; sequence s occupies rows
// [cu_seqlens[s], cu_seqlens[s+1]). A token attends only to tokens of its own sequence at or
// before its position. Query head h uses key/value head h / (n_heads / n_kv_heads).
//
// Layouts (row-major): q, out: [tokens, n_heads * head_dim]; k, v: [tokens, n_kv_heads * head_dim];
// lse: [n_heads, tokens] = log-sum-exp of the scaled scores of each query row (saved for backward,
// which recomputes the probabilities instead of storing the tokens x tokens matrix).
// scale = 1/sqrt(head_dim).
#include <cstdint>

namespace odc::kernels::cpu {

struct AttentionShape {
  const std::int32_t* cu_seqlens = nullptr;  // num_seqs + 1 entries, cu_seqlens[0] == 0
  int num_seqs = 0;
  std::int64_t tokens = 0;  // == cu_seqlens[num_seqs]
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

template <typename T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* out,
                       T* lse);

// dq, dk, dv are overwritten.
template <typename T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

}  // namespace odc::kernels::cpu
