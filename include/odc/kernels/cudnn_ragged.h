#pragma once
// The host side of cuDNN's fused attention over packed sequences (kernels/cuda_cudnn_attention.h):
// the shape class a microbatch falls in and the ragged tables its graphs read, as plain numbers,
// so that they are built and tested without a GPU.
//
// A graph views the packed [tokens, heads * head_dim] tensors as a padded batch [B, heads, S, d]
// with ragged offsets: B is the number of sequences rounded up to a power of two (the extra
// sequences are empty), S the longest sequence rounded up to a power of two, at least 64. Graphs
// are built per (B, S, heads, head_dim, direction, determinism): the class, few per run.
#include <cstdint>
#include <vector>

namespace odc::kernels {

std::int64_t cudnn_batch_bucket(int num_seqs);              // >= 1
std::int64_t cudnn_seqlen_bucket(std::int64_t max_seqlen);  // >= 64

struct CudnnRaggedTables {
  std::int64_t b = 0;  // padded batch
  std::int64_t s = 0;  // sequence bucket
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

}  // namespace odc::kernels
