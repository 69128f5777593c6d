#pragma once
// CUDA causal attention over packed variable-length sequences with grouped-query heads (built when
// the CUDA backend is enabled): the semantics, layouts and scale of cpu::attention_forward /
// attention_backward (attention.h), in bf16 storage with fp32 accumulation on the tensor cores
// (mma.sync m16n8k16), FlashAttention-2 style: query tiles with an online softmax, the
// log-sum-exp saved, and a backward that recomputes the probabilities from it.
//
// Layouts (row-major, bf16 as std::uint16_t bit patterns, all device pointers):
//   q, out, dout, dq: [tokens, n_heads * head_dim];  k, v, dk, dv: [tokens, n_kv_heads * head_dim];
//   lse: fp32 [n_heads, tokens] (natural log of the sum of exp(scale * q.k) over the row's keys).
// scale = 1/sqrt(head_dim); query head h uses kv head h / (n_heads / n_kv_heads).
// Supported head_dim: 64 and 128 (anything else throws odc::Error). Device pointers must be
// 16-byte aligned (cudaMalloc'ed buffers and head-aligned offsets into them are).
//
// Work distribution: the sequence bounds are read on the host (cu_seqlens) to build a small table
// of (sequence, tile) entries, heaviest tiles first, which is uploaded with every call on `stream`
// (an allocation from `allocator` on that stream; a few KiB). Query tiles that lie entirely above
// the causal diagonal are never visited.
//
// Determinism: every output element is produced by exactly one thread block with a fixed
// reduction order and no atomics, so forward and backward are bitwise reproducible run to run.
// The backward runs three kernels: D = rowsum(dout * out); dK/dV per key tile (looping over the
// query tiles and over the query heads of the kv group, so the GQA sum over a group's heads
// happens in registers); dQ per query tile (looping over the key tiles). dQ therefore recomputes
// the scores and dP = dO V^T instead of accumulating atomically: 7 tile GEMMs per (query tile,
// key tile) instead of the 5 of an atomic dQ, in exchange for determinism and no fp32 dQ buffer.
#include <cstdint>

#include "odc/kernels/cuda_device.h"

namespace odc::kernels::cuda {

struct CudaAttentionShape {
  // Host copy of the sequence bounds: num_seqs + 1 entries, cu_seqlens[0] == 0, non-decreasing,
  // cu_seqlens[num_seqs] == tokens. Only read on the host, during the call (scheduling and
  // validation); the kernels get the bounds through the uploaded tile table, so no device copy
  // of cu_seqlens is needed. Empty sequences are allowed.
  const std::int32_t* cu_seqlens = nullptr;
  int num_seqs = 0;
  std::int64_t tokens = 0;
  int n_heads = 0;
  int n_kv_heads = 0;  // n_heads must be a multiple of n_kv_heads
  int head_dim = 0;    // 64 or 128
};

// out, lse overwritten. Asynchronous on `stream` (a cudaStream_t; nullptr = legacy default).
void attention_forward(const CudaAttentionShape& shape, const std::uint16_t* q,
                       const std::uint16_t* k, const std::uint16_t* v, std::uint16_t* out,
                       float* lse, DeviceAllocator& allocator, void* stream);

// dq, dk, dv overwritten (none may alias an input). out and lse are the forward's. Uses a fp32
// workspace of n_heads * tokens floats (D) from `allocator` on `stream`.
void attention_backward(const CudaAttentionShape& shape, const std::uint16_t* q,
                        const std::uint16_t* k, const std::uint16_t* v, const std::uint16_t* out,
                        const float* lse, const std::uint16_t* dout, std::uint16_t* dq,
                        std::uint16_t* dk, std::uint16_t* dv, DeviceAllocator& allocator,
                        void* stream);

// Causal attention FLOPs of one forward: 4 * sum_i s_i (s_i + 1) / 2 * head_dim * n_heads (the
// QK^T and PV GEMMs over the unmasked pairs). A backward is conventionally counted as 2.5x this.
double attention_forward_flops(const CudaAttentionShape& shape);

}  // namespace odc::kernels::cuda
