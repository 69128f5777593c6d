#pragma once
// Causal attention of new query rows over a key/value cache (incremental decoding): one sequence
// whose first `past` rows' keys and values are cached, extended by `queries` new rows at
// positions [past, past + queries). The cache already holds the new rows' keys and values too,
// so it has past + queries valid rows; new row i attends to cache rows [0, past + i]. Grouped-query
// heads as in attention.h: query head h reads kv head h / (n_heads / n_kv_heads).
//
// Layouts (row-major): q, out: [queries, n_heads * head_dim]; k_cache, v_cache: at least
// [past + queries, n_kv_heads * head_dim] (rows beyond are never read). scale = 1/sqrt(head_dim).
// past = 0 with queries = the sequence length is attention_forward of one sequence (prefill).
// No log-sum-exp is kept: this is an inference op without a backward.
#include <cstdint>

namespace odc::kernels::cpu {

struct CachedAttentionShape {
  std::int64_t queries = 0;  // new rows
  std::int64_t past = 0;     // cached rows before them
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

template <typename T>
void attention_cached_forward(const CachedAttentionShape& shape, const T* q, const T* k_cache, const T* v_cache,
                              T* out);

}  // namespace odc::kernels::cpu
