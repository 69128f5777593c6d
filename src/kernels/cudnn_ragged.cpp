#include "odc/kernels/cudnn_ragged.h"

#include <algorithm>
#include <limits>

#include "odc/core/error.h"

namespace odc::kernels {

namespace {
std::int64_t next_power_of_two(std::int64_t n) {
  std::int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}
}  // namespace

std::int64_t cudnn_batch_bucket(int num_seqs) { return next_power_of_two(std::max(num_seqs, 1)); }

std::int64_t cudnn_seqlen_bucket(std::int64_t max_seqlen) {
  return next_power_of_two(std::max<std::int64_t>(max_seqlen, 64));
}

std::int64_t cudnn_token_bucket(std::int64_t tokens, std::int64_t b, std::int64_t s) {
  return std::min(next_power_of_two(std::max<std::int64_t>(tokens, 1)), b * s);
}

std::int64_t cudnn_backward_workspace_estimate(std::int64_t token_cap, int n_heads, int n_kv_heads, int head_dim) {
  if (token_cap <= 0) return 0;
  // In double: the dP term of a large cap exceeds int64 (it only has to compare with the bound).
  const double h = n_heads, d = head_dim;
  double dp = 0;
  for (std::int64_t s = 64; s <= cudnn_seqlen_bucket(token_cap); s *= 2) {
    // The longest sequence falls in bucket s; the rest of the cap makes as many 1-token sequences.
    const std::int64_t longest = s == 64 ? 1 : s / 2 + 1;
    if (longest > token_cap) break;
    const std::int64_t seqs = 1 + (token_cap - longest);
    const double b = static_cast<double>(cudnn_batch_bucket(static_cast<int>(std::min<std::int64_t>(seqs, 1 << 30))));
    dp = std::max(dp, b * h * static_cast<double>(s) * static_cast<double>(std::max<std::int64_t>(s, 128)) * 2.0);
  }
  const double per_token = h * 4.0 + h * d * 4.0 * (n_heads != n_kv_heads ? 3.0 : 1.0);
  const double total = dp + static_cast<double>(next_power_of_two(token_cap)) * per_token;
  constexpr double kMax = static_cast<double>(std::numeric_limits<std::int64_t>::max());
  return total >= kMax ? std::numeric_limits<std::int64_t>::max() : static_cast<std::int64_t>(total);
}

CudnnRaggedTables cudnn_ragged_tables(const std::int32_t* cu_seqlens, int num_seqs, int n_heads, int n_kv_heads,
                                      int head_dim) {
  if (cu_seqlens == nullptr || num_seqs < 0) fail("cuDNN attention: the host cu_seqlens are missing ({} sequences)", num_seqs);
  const int n = num_seqs;
  const std::int64_t tokens = cu_seqlens[n];
  if (head_dim != 64 && head_dim != 128) fail("cuDNN attention: head_dim {} is not supported (64 or 128)", head_dim);
  if (n_heads <= 0 || n_kv_heads <= 0 || n_heads % n_kv_heads != 0) {
    fail("cuDNN attention: {} query heads are not a whole number of groups of {} kv heads", n_heads, n_kv_heads);
  }
  if (cu_seqlens[0] != 0) {
    fail("cuDNN attention: cu_seqlens must run from 0 to the {} tokens (got {} .. {})", tokens, cu_seqlens[0], tokens);
  }
  if (tokens * n_heads * head_dim > std::numeric_limits<std::int32_t>::max()) {
    fail("cuDNN attention: {} tokens x {} heads x {} exceed the int32 ragged offsets; use model.attention: native",
         tokens, n_heads, head_dim);
  }
  std::int64_t longest = 0;
  for (int i = 0; i < n; ++i) {
    const std::int64_t len = std::int64_t{cu_seqlens[i + 1]} - cu_seqlens[i];
    if (len < 0) {
      fail("cuDNN attention: cu_seqlens decrease at sequence {} ({} -> {})", i, cu_seqlens[i], cu_seqlens[i + 1]);
    }
    longest = std::max(longest, len);
  }
  CudnnRaggedTables t;
  t.b = cudnn_batch_bucket(n);
  t.s = cudnn_seqlen_bucket(longest);
  t.t = cudnn_token_bucket(tokens, t.b, t.s);
  const std::int64_t q_row = std::int64_t{n_heads} * head_dim, kv_row = std::int64_t{n_kv_heads} * head_dim;
  for (std::int64_t i = 0; i <= t.b; ++i) {
    const std::int64_t start = cu_seqlens[static_cast<std::size_t>(std::min<std::int64_t>(i, n))];
    if (i < t.b) t.seq_len.push_back(i < n ? cu_seqlens[static_cast<std::size_t>(i + 1)] - static_cast<std::int32_t>(start) : 0);
    t.q_offsets.push_back(static_cast<std::int32_t>(start * q_row));
    t.kv_offsets.push_back(static_cast<std::int32_t>(start * kv_row));
    t.stats_offsets.push_back(static_cast<std::int32_t>(start * n_heads));
  }
  return t;
}

}  // namespace odc::kernels
