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
//
// Key segments (context parallelism; kernels/attention_segments.h): with cu_seqlens_k set, query
// segment s attends to rows [cu_seqlens_k[s], cu_seqlens_k[s+1]) of k and v (key_tokens rows),
// the causal diagonal aligned at the end of both segments (query row i of q_len attends key j of
// k_len iff j <= i + k_len - q_len; k_len >= q_len unless the query segment is empty). k, v, dk,
// dv are then [key_tokens, n_kv_heads * head_dim]; q, out, dq, dout and lse as above. Without
// them (null), the keys are the query rows, exactly as before.
#include <cstdint>

namespace odc::kernels::cpu {

struct AttentionShape {
  const std::int32_t* cu_seqlens = nullptr;  // num_seqs + 1 entries, cu_seqlens[0] == 0
  int num_seqs = 0;
  std::int64_t tokens = 0;  // == cu_seqlens[num_seqs]
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  // Key segments: num_seqs + 1 cumulative entries, or null (the keys are the query rows).
  const std::int32_t* cu_seqlens_k = nullptr;
  std::int64_t key_tokens = 0;  // == cu_seqlens_k[num_seqs] (0 without key segments)
};

template <typename T>
void attention_forward(const AttentionShape& shape, const T* q, const T* k, const T* v, T* out,
                       T* lse);

// dq, dk, dv are overwritten (dk/dv rows of keys no query attends to: zero).
template <typename T>
void attention_backward(const AttentionShape& shape, const T* q, const T* k, const T* v,
                        const T* out, const T* lse, const T* dout, T* dq, T* dk, T* dv);

}  // namespace odc::kernels::cpu
