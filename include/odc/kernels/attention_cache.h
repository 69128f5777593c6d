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
#include <span>

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

// Batched decoding (Backend::attention_decode_batch): past.size() sequences with one new row
// each, sequence i after past[i] cached rows in its own caches k_caches[i], v_caches[i]
// ([>= past[i] + 1, n_kv_heads * head_dim]). Its new key and value (row i of k_new, v_new:
// [sequences, n_kv_heads * head_dim]) are written at row past[i] of its caches, then its query
// (row i of q) attends to its rows [0, past[i]] into row i of out ([sequences, n_heads * head_dim]).
// All sequences run in one parallel region over (sequence, kv head) pieces, each of them exactly
// attention_cached_forward's piece of that kv head for the one row: the results are bitwise those
// of writing the rows and calling attention_cached_forward per sequence, for any thread count.
// round_bf16: each output rounded to bf16 (nearest even), as the CPU backend's bf16 mode rounds
// attention_cached's.
struct DecodeBatchShape {
  std::span<const std::int64_t> past;
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

template <typename T>
void attention_decode_batch_forward(const DecodeBatchShape& shape, const T* q, const T* k_new, const T* v_new,
                                    T* const* k_caches, T* const* v_caches, T* out, bool round_bf16);

}  // namespace odc::kernels::cpu
