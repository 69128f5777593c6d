#pragma once
// Key segments of the packed causal attention (context parallelism, model/context_split.h): query
// segment s holds rows [cu_seqlens[s], cu_seqlens[s+1]) of q, and attends to its own key segment,
// rows [cu_seqlens_k[s], cu_seqlens_k[s+1]) of separate k/v buffers (key_tokens rows). A query
// chunk covering positions [b, e) of a sequence sees the keys of positions [0, e): the causal
// diagonal is aligned at the END of both segments (bottom-right, as FlashAttention's varlen and
// cuDNN's BOTTOM_RIGHT diagonal): query row i (0-based, q_len rows) attends key j (0-based, k_len
// rows) iff j <= i + (k_len - q_len). So k_len >= q_len: every query row sees at least the key of
// its own position. Without key segments (cu_seqlens_k null), the keys are the query rows
// (offset 0): the attention every caller had before.
//
// Header-only so that the CPU kernels, the CPU bf16 mode and the CUDA host code (also compiled by
// the CPU emulator, which links no odc library) share one definition of the bounds and checks.
#include <cstdint>

#include "odc/core/error.h"

namespace odc::kernels {

struct SegmentBounds {
  std::int64_t q_begin = 0, q_len = 0;  // query rows
  std::int64_t k_begin = 0, k_len = 0;  // key rows (of k/v, or of q's rows without key segments)
  // Keys before the first query row's own position: query row i attends keys [0, i + offset].
  std::int64_t offset() const { return k_len - q_len; }
};

// Segment s's rows; cu_seqlens_k null: the keys are the query rows.
inline SegmentBounds segment_bounds(const std::int32_t* cu_seqlens, const std::int32_t* cu_seqlens_k, int s) {
  SegmentBounds b;
  b.q_begin = cu_seqlens[s];
  b.q_len = cu_seqlens[s + 1] - b.q_begin;
  const std::int32_t* k = cu_seqlens_k != nullptr ? cu_seqlens_k : cu_seqlens;
  b.k_begin = k[s];
  b.k_len = k[s + 1] - b.k_begin;
  return b;
}

// The key bounds against the query bounds (which the caller has checked): odc::Error naming `who`,
// the segment and the lengths when cu_seqlens_k does not start at 0, decreases, does not end at
// key_tokens, or gives a non-empty query segment fewer keys than queries. An empty query segment
// may have any number of keys (nothing attends to them; their dk/dv rows are zero). Without key
// segments, key_tokens must be 0 or the query tokens (a caller that sets it alone has a bug).
inline void check_key_segments(const char* who, const std::int32_t* cu_seqlens, const std::int32_t* cu_seqlens_k,
                               int num_seqs, std::int64_t tokens, std::int64_t key_tokens) {
  if (cu_seqlens_k == nullptr) {
    if (key_tokens != 0 && key_tokens != tokens) {
      fail("{}: key_tokens = {} without key segments (cu_seqlens_k); the keys are the {} query rows", who, key_tokens,
           tokens);
    }
    return;
  }
  if (cu_seqlens_k[0] != 0) fail("{}: cu_seqlens_k[0] = {}, not 0", who, cu_seqlens_k[0]);
  for (int s = 0; s < num_seqs; ++s) {
    const SegmentBounds b = segment_bounds(cu_seqlens, cu_seqlens_k, s);
    if (b.k_len < 0) fail("{}: cu_seqlens_k decreases at segment {} ({} -> {})", who, s, b.k_begin, b.k_begin + b.k_len);
    if (b.q_len > 0 && b.k_len < b.q_len) {
      fail("{}: segment {} has {} query rows but only {} key rows (a query segment attends at least as many keys as it "
           "has rows: the causal diagonal is aligned at the end)",
           who, s, b.q_len, b.k_len);
    }
  }
  if (cu_seqlens_k[num_seqs] != key_tokens) {
    fail("{}: cu_seqlens_k ends at {} but key_tokens = {}", who, cu_seqlens_k[num_seqs], key_tokens);
  }
}

}  // namespace odc::kernels
