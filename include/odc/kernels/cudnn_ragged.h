#pragma once
// The host side of cuDNN's fused attention over packed sequences (kernels/cuda_cudnn_attention.h):
// the shape class a microbatch falls in and the ragged tables its graphs read, as plain numbers,
// so that they are built and tested without a GPU.
//
// A graph views the packed [tokens, heads * head_dim] tensors as a padded batch [B, heads, S, d]
// with ragged offsets: B is the number of sequences rounded up to a power of two (the extra
// sequences are empty), S the longest sequence rounded up to a power of two, at least 64. Graphs
// are built per (B, S, heads, head_dim, direction, determinism) and, for the backward, the token
// bucket T: the class, few per run.
//
// T is the total the backward graph sizes the workspace it keeps per token for
// (SDPA_backward_attributes::set_max_total_seq_len_q/kv: softmax sums, the dQ accumulator, the
// full-head dK/dV accumulators of grouped heads), which cuDNN otherwise sizes over the padded
// B x S view. A power of two: at most twice what the tokens need, and at most log2(B) + 1 buckets
// per (B, S) (the tokens lie between S/2 and B * S), in practice one or two for microbatches
// packed to a token cap; a finer bucket would save part of a workspace linear in the tokens (a
// fraction of the activations) for more graph builds. The forward's graph has no such workspace
// (the frontend only validates the attribute there): its key leaves T at 0.
#include <cstdint>
#include <vector>

namespace odc::kernels {

std::int64_t cudnn_batch_bucket(int num_seqs);              // >= 1
std::int64_t cudnn_seqlen_bucket(std::int64_t max_seqlen);  // >= 64
// The next power of two of `tokens` (>= 1), at most b * s (the padded view holds no more).
std::int64_t cudnn_token_bucket(std::int64_t tokens, std::int64_t b, std::int64_t s);

struct CudnnRaggedTables {
  std::int64_t b = 0;  // padded batch
  std::int64_t s = 0;  // sequence bucket
  std::int64_t t = 0;  // token bucket (the backward's)
  std::vector<std::int32_t> seq_len;        // [b]: each sequence's tokens, 0 for the padding
  std::vector<std::int32_t> q_offsets;      // [b + 1]: elements before sequence i in q-like tensors
  std::vector<std::int32_t> kv_offsets;     // [b + 1]: the same in k/v-like tensors
  std::vector<std::int32_t> stats_offsets;  // [b + 1]: in the token-major stats [tokens, n_heads]
};

// From the microbatch's host cu_seqlens (num_seqs + 1 bounds from 0 to tokens, non-decreasing;
// a pointer and a count: CUDA sources include this header, compiled as C++17)
// and its heads; odc::Error naming what is wrong (bounds, head_dim not 64/128, heads not whole
// groups, offsets beyond int32).
CudnnRaggedTables cudnn_ragged_tables(const std::int32_t* cu_seqlens, int num_seqs, int n_heads, int n_kv_heads,
                                      int head_dim);

// ---- the workspace bound ----
//
// A call whose graph needs more workspace than the bound (model.cudnn_workspace_mib) is not run by
// cuDNN: the native kernels run it (CudnnAttention::forward/backward return false). Below cuDNN
// 9.25 the deterministic backward's dP scratch is B * n_heads * S * S * 2 bytes over the padded
// view whatever the token bucket says (64 sequences with the longest at 4,000 tokens and 32 heads:
// 69 GB); the bound keeps such microbatches off cuDNN. 2 GiB holds the 1 GiB dP scratch cuDNN 9.25+
// is capped at (CUDNN_FRONTEND_ATTN_DP_WORKSPACE_LIMIT) beside the per-token tensors of ~20K tokens
// of 32 grouped heads (48 KiB per token at head_dim 128).
inline constexpr std::int64_t kCudnnWorkspaceLimitMiB = 2048;

// An estimate, computed without a device, of the most workspace a deterministic cuDNN backward
// needs for a microbatch of at most `token_cap` tokens (each sequence at least one token): the dP
// scratch B * n_heads * S * S' * 2 bytes (S' = S rounded up to 128, as the frontend sizes it on
// Hopper) at its worst over the shape classes such a microbatch can fall in, plus the per-token
// tensors at the token bucket (4 B per head for the softmax sums, 4 * head_dim B per head for the
// dQ accumulator and, with grouped heads, twice that for the full-head dK and dV accumulators).
// Saturates at INT64_MAX. The memory plan counts min(bound, estimate): the bound is what a call
// can take, the estimate is smaller only for small token caps.
std::int64_t cudnn_backward_workspace_estimate(std::int64_t token_cap, int n_heads, int n_kv_heads, int head_dim);

}  // namespace odc::kernels
